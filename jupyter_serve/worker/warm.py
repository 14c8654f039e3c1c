"""The worker factory's warm-up, and the per-worker settings every `L` frame carries.

The worker factory (`factory`) imports torch (when it is installed) and the
built-in handler runtime with `warm_up()` before it forks any worker, and tells
the server which top-level packages it now holds (`imported_packages`: a
model's own dependencies could no longer replace them in a forked worker).

A built-in handler whose load imports much more than that (`causal_lm`: transformers'
model and generation code, most of a language model worker's own memory and start)
has its modules in `HANDLER_MODULES`: the factory imports them with
`warm_up_handler` when it first forks a worker for that handler, and the workers
forked after that share them.

`apply_settings` then makes a forked worker the worker a fresh launch would
have been, before the handler module is imported: the `L` frame's `sys_path`
entries go where `PYTHONPATH` would have put them (right after this package's
folder), its `env` changes go to `os.environ` (None removes a name;
`CUDA_VISIBLE_DEVICES` still works because torch initialises CUDA lazily and the
factory never does), and `torch_threads` goes to `torch.set_num_threads` when
torch is imported (OpenMP and MKL read their variables when torch loads, so only
the call reaches a warm torch; their pools start in the worker, on its first
parallel op). For a fresh worker, whose launch already applied all of it, these
are no-ops.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Mapping, Sequence

from jupyter_serve._paths import PACKAGE_ROOT

__all__ = [
    "HANDLER_MODULES",
    "WARM_MODULES",
    "apply_settings",
    "imported_packages",
    "set_torch_threads",
    "warm_up",
    "warm_up_handler",
]

# torch, the default handlers' base and the worker's own loop (`__main__.run`).
WARM_MODULES = ("torch", "jupyter_serve.handlers.base", "jupyter_serve.worker.__main__")

# What a built-in handler's load imports beyond WARM_MODULES, by handler name.
HANDLER_MODULES: dict[str, tuple[str, ...]] = {
    "causal_lm": (
        "jupyter_serve.handlers.causal_lm",
        "transformers.modeling_utils",
        "transformers.generation.utils",
    ),
}


def warm_up() -> list[str]:
    """Import what most handlers need; the top-level packages imported now."""
    _import_all(WARM_MODULES)
    return imported_packages()


def warm_up_handler(handler: str) -> bool:
    """Import `HANDLER_MODULES[handler]`; False when there is nothing (more) to import."""
    names = [name for name in HANDLER_MODULES.get(handler, ()) if name not in sys.modules]
    _import_all(names)
    return bool(names)


def _import_all(names: Sequence[str]) -> None:
    for name in names:
        with contextlib.suppress(ImportError):  # not installed: the worker will say so
            importlib.import_module(name)


def imported_packages() -> list[str]:
    """Top-level names of the non-stdlib modules imported so far, sorted."""
    names = {name.partition(".")[0] for name in sys.modules}
    return sorted(name for name in names - sys.stdlib_module_names if not name.startswith("__"))


def apply_settings(
    sys_path: Sequence[str], env: Mapping[str, str | None], torch_threads: int | None
) -> None:
    """Extend `sys.path`, change `os.environ` and set torch's threads, as a launch would have."""
    _extend_path(sys_path)
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    set_torch_threads(torch_threads)


def _extend_path(entries: Sequence[str]) -> None:
    new = [entry for entry in dict.fromkeys(entries) if entry not in sys.path]
    at = sys.path.index(PACKAGE_ROOT) + 1 if PACKAGE_ROOT in sys.path else 0
    sys.path[at:at] = new


def set_torch_threads(count: int | None) -> None:
    """`torch.set_num_threads(count)` if torch is imported (never imports it)."""
    torch = sys.modules.get("torch")
    if count and torch is not None:
        torch.set_num_threads(count)
