"""The tree is the architecture: what each package of jupyter_serve may import, read
from the sources (tests/test_layering.py proves the third-party side in fresh
interpreters).

* `wire/` (the server<->worker protocol, errors, OIP tensors, log-safe text) and
  `archive/` import only the standard library and `wire/`: both sides load them;
* the Jupyter server (`server/`) never imports the kernel side, the workers or handlers:
  it runs no model code and reaches workers over the wire only;
* workers (`worker/`) and `handlers/` never import the server or the kernel side;
* the kernel side (`kernel/`) talks to the server over HTTP, never importing `server/`
  (it may run a handler itself, as `%%handler` does, through `worker/`);
* no two modules import each other, however indirectly, at run time (imports under
  `if TYPE_CHECKING:` are for the type checker only).
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jupyter_serve"
STDLIB_ONLY = {"wire": {"wire", "_version"}, "archive": {"archive", "wire", "_version"}}
FORBIDDEN = {
    "server": {"kernel", "worker", "handlers", "export", "cli", "demo"},
    "worker": {"server", "kernel", "export", "cli", "demo"},
    "handlers": {"server", "kernel", "export", "cli", "demo"},
    "kernel": {"server", "cli", "demo"},
}


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "labextension" in path.parts:
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = modules()


def runtime_imports(path: Path) -> Iterator[str]:
    """Every module `path` imports when it runs (function-level imports included, the
    type checker's `if TYPE_CHECKING:` blocks not)."""
    pending: list[ast.AST] = [ast.parse(path.read_text())]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                yield submodule if submodule in MODULES else node.module
        pending.extend(ast.iter_child_nodes(node))


def area(module: str) -> str:
    """The package (or top-level module) of jupyter_serve a dotted name is in."""
    return module.split(".")[1] if module.count(".") else ""


def test_every_package_imports_only_what_its_side_may() -> None:
    wrong = []
    for module, path in MODULES.items():
        mine = area(module)
        for imported in set(runtime_imports(path)):
            top = imported.split(".")[0]
            theirs = area(imported) if top == "jupyter_serve" else None
            if mine in STDLIB_ONLY:
                allowed = theirs in STDLIB_ONLY[mine] or (
                    theirs is None and top in sys.stdlib_module_names | {"__future__"}
                )
                if not allowed:
                    wrong.append(f"{module} -> {imported}")  # fmt: skip
            elif theirs in FORBIDDEN.get(mine, set()):
                wrong.append(f"{module} -> {imported}")
    assert wrong == []


def test_no_import_circles() -> None:
    graph = {module: {name for name in runtime_imports(path) if name in MODULES} - {module}
             for module, path in MODULES.items()}  # fmt: skip
    circles = [module for module in graph if reaches(graph, module, module)]
    assert circles == []


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen: set[str] = set()
    pending = list(graph[start])
    while pending:
        module = pending.pop()
        if module == goal:
            return True
        if module not in seen:
            seen.add(module)
            pending.extend(graph.get(module, ()))
    return False


HOMES = {
    "client": "kernel.client",
    "widgets": "kernel.widgets",
    "widgets.explanations": "kernel.widgets.explanations",
    "hub": "server.hub",
    "ts_config": "server.ts_config",
}


@pytest.mark.parametrize("facade", sorted(HOMES))
def test_public_import_paths_name_the_same_objects(facade: str) -> None:
    """The import paths notebooks and hub configs name (`jupyter_serve.client`, ...) give
    the kernel side's and the server's own objects."""
    public = importlib.import_module(f"jupyter_serve.{facade}")
    inner = importlib.import_module(f"jupyter_serve.{HOMES[facade]}")
    assert public.__all__
    for name in public.__all__:
        assert getattr(public, name) is getattr(inner, name), name
