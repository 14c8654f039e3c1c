"""Per-model Python dependencies: `pip install --target` a model's requirements.txt.

TorchServe's `install_py_dep_per_model` for jupyter_serve. The caller decides
whether installing is enabled; this module only installs, and only into a
folder of its own (`target`), which the worker pool then puts on that model's
workers' `sys.path` (`ModelSpec.python_path`). It never touches the server's
environment: pip runs with `--target`, and the `PIP_*` variables that would
redirect it (`PIP_USER`, `PIP_PREFIX`, ...) are removed from its environment.

pip runs with the interpreter the workers use (`python`), so compiled wheels
match it, in the requirements file's folder (relative paths in the file are
relative to the model). The install goes to a staging folder first and replaces
`target` only on success; a marker file in `target` records a hash of the
requirements text, the interpreter and the extra pip arguments, and an install
with the same hash is skipped. Files the requirements point to are not hashed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from jupyter_serve.server.pool.environment import withheld
from jupyter_serve.wire.errors import BadRequest, ServeError

MARKER = ".jupyter_serve-requirements.sha256"
TAIL_LINES = 30
_REDIRECTING_PIP_VARS = ("PIP_USER", "PIP_TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_EDITABLE")

log = logging.getLogger(__name__)


async def install_requirements(
    requirements: Path,
    target: Path,
    python: str,
    *,
    extra_args: Sequence[str] = (),
    timeout: float | None = None,
    withhold: Sequence[str] = (),
) -> Path:
    """Install `requirements` into `target` with `python -m pip`; return `target`.

    Skipped when `target` already holds this exact install. `extra_args` go to
    pip as they are (e.g. `["--no-index", "--find-links", wheels]`); `timeout`
    (seconds) bounds the pip run. pip (and the setup code of a source package it builds)
    gets the server's environment without the credentials workers never get either
    (`pool.environment.withheld`, with `withhold`'s patterns). Raises `ServeError` (500)
    with the tail of pip's output when pip fails or times out, `BadRequest` when the file
    is missing.
    """
    requirements, target = Path(requirements).absolute(), Path(target).absolute()
    if not requirements.is_file():
        raise BadRequest(f"Requirements file not found: {requirements}")
    digest = requirements_digest(requirements, python, extra_args)
    if installed_digest(target) == digest:
        log.debug("Requirements %s already installed in %s", requirements, target)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        await _run_pip(python, requirements, staging, extra_args, timeout, withhold)
        (staging / MARKER).write_text(digest, encoding="utf-8")
        _replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def requirements_digest(requirements: Path, python: str, extra_args: Sequence[str] = ()) -> str:
    """The hash an install of these requirements with this interpreter is recorded under."""
    sha = hashlib.sha256(Path(requirements).read_bytes())
    for part in (python, *extra_args):
        sha.update(b"\0" + part.encode("utf-8"))
    return sha.hexdigest()


def installed_digest(target: Path) -> str | None:
    """The digest recorded in `target` by the last successful install, if any."""
    try:
        return (Path(target) / MARKER).read_text(encoding="utf-8").strip()
    except OSError:
        return None


def pip_command(
    python: str, requirements: Path, target: Path, extra_args: Sequence[str] = ()
) -> list[str]:
    """The pip command line: quiet about its own version, never prompting, into `target`."""
    return [
        python,
        *("-m", "pip", "install", "--disable-pip-version-check", "--no-input"),
        *("--target", str(target), "-r", str(requirements)),
        *extra_args,
    ]


async def _run_pip(
    python: str,
    requirements: Path,
    target: Path,
    extra_args: Sequence[str],
    timeout: float | None,
    withhold: Sequence[str] = (),
) -> None:
    command = pip_command(python, requirements, target, extra_args)
    log.info("Installing model requirements: %s", " ".join(command))
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=requirements.parent,
            env=_pip_env(withhold),
        )
    except OSError as exc:
        raise ServeError(f"Cannot run pip with {python}: {exc}") from exc
    output = await _communicate(process, timeout, requirements)
    log.debug("pip output for %s:\n%s", requirements, output)
    if process.returncode != 0:
        raise ServeError(
            f"Installing the requirements {requirements} failed "
            f"(pip exited with {process.returncode}):\n{_tail(output)}"
        )


async def _communicate(
    process: asyncio.subprocess.Process, timeout: float | None, requirements: Path
) -> str:
    """pip's combined output; pip is killed on timeout or when the caller is cancelled."""
    try:
        stdout, _ = await asyncio.wait_for(process.communicate(), timeout)
    except asyncio.TimeoutError:
        await _kill(process)
        message = f"Installing the requirements {requirements} timed out after {timeout} s."
        raise ServeError(message) from None
    except BaseException:
        await _kill(process)
        raise
    return stdout.decode("utf-8", errors="replace")


async def _kill(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
    await process.wait()


def _pip_env(withhold: Sequence[str] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in _REDIRECTING_PIP_VARS and not withheld(k, withhold)}  # fmt: skip
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _tail(output: str) -> str:
    return "\n".join(output.strip().splitlines()[-TAIL_LINES:])


def _replace(staging: Path, target: Path) -> None:
    """Put `staging` where `target` is, dropping the old install."""
    if not target.exists():
        staging.rename(target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}-old-", dir=target.parent))
    old.rmdir()
    target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)
