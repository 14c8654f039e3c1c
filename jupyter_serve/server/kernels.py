"""Run a model's workers with the Python of a Jupyter kernelspec (a model's own environment).

`python_for_kernel("torch-env")` is the interpreter that kernelspec starts: `argv[0]`
of its `kernel.json`, resolved the way jupyter_client resolves it when it launches
the kernel. Such an interpreter usually lacks jupyter_serve, so the worker pool
prepends `PACKAGE_ROOT` (jupyter_serve/_paths.py: the folder holding this package) to the worker's
`PYTHONPATH`; the worker side is standard library only, plus what handlers need.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

from jupyter_serve.wire.errors import BadRequest

if TYPE_CHECKING:
    from jupyter_client.kernelspec import KernelSpec

_PYTHON_NAME = re.compile(r"(python|pypy)[0-9.]*(\.exe)?", re.IGNORECASE)


def python_for_kernel(name: str) -> str:
    """The Python interpreter the kernelspec `name` starts (not symlink-resolved)."""
    spec = _kernel_spec(name)
    if str(getattr(spec, "language", "python")).lower() != "python":
        raise BadRequest(f'Kernel "{name}" runs {spec.language}, not Python: pick a Python kernel.')
    argv = [str(arg) for arg in spec.argv]
    via_env = bool(argv) and Path(argv[0]).name == "env"  # ["/usr/bin/env", "python3", ...]
    if via_env:
        argv = _env_command(argv[1:])
    if not argv or not _PYTHON_NAME.fullmatch(Path(argv[0]).name):
        raise BadRequest(
            f'Kernel "{name}" does not start a Python interpreter directly '
            f"(argv: {spec.argv!r}); jupyter_serve needs `argv[0]` to be a python executable."
        )
    return _resolve_executable(name, argv[0], spec.env or {}, as_launcher=not via_env)


def _env_command(args: list[str]) -> list[str]:
    """The command `env ARGS` runs: after its options and NAME=VALUE assignments."""
    rest = iter(args)
    for arg in rest:
        if arg in ("-u", "--unset", "-C", "--chdir"):
            next(rest, None)  # these options take a value
        elif not arg.startswith("-") and "=" not in arg:
            return [arg, *rest]
    return []


def _kernel_spec(name: str) -> KernelSpec:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    manager = KernelSpecManager()
    try:
        return manager.get_kernel_spec(name)
    except NoSuchKernel:
        available = ", ".join(sorted(manager.find_kernel_specs())) or "none"
        raise BadRequest(
            f'No such kernel: "{name}". Available kernelspecs: {available} '
            "(list them with `jupyter kernelspec list`)."
        ) from None


def _resolve_executable(
    kernel: str, program: str, spec_env: dict[str, str], *, as_launcher: bool
) -> str:
    """An absolute path for `program`, as jupyter_client (or `env`) would run it."""
    if as_launcher and program in _launcher_python_names():
        # jupyter_client starts these names as the server's own interpreter.
        return sys.executable
    if os.sep in program or (os.altsep and os.altsep in program):
        path = Path(program)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BadRequest(f'Kernel "{kernel}" names {program}, which is not an executable.')
        return str(path.absolute())
    search = Template(spec_env["PATH"]).safe_substitute(os.environ) if "PATH" in spec_env else None
    found = shutil.which(program, path=search)
    if found is None:
        raise BadRequest(f'Kernel "{kernel}" runs "{program}", which is not on its PATH.')
    return str(Path(found).absolute())


def _launcher_python_names() -> set[str]:
    major, minor = sys.version_info[:2]
    return {"python", f"python{major}", f"python{major}.{minor}"}
