"""Per-model dependencies for function handlers: unpacking extra files, installing packages.

`unpack_into(model_dir, archive)` extracts a `.tar.gz` (or zip) shipped in the
model folder into that folder, with the archive package's zip-slip and zip-bomb
checks (members may not leave `model_dir`). It is idempotent and safe with
several workers of one model starting at once: a lock file serialises them
and a marker records which archive was unpacked. `install_missing` pip-installs
only the requirements whose distribution is not installed yet.
Standard library only.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from jupyter_serve.archive.extract import extract_mar
from jupyter_serve.wire.errors import UnsafeArchive

log = logging.getLogger(__name__)

_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_LOCK_NAME = ".jupyter_serve_unpack.lock"


def unpack_into(model_dir: Path, archive: str) -> bool:
    """Extract `archive` (a path relative to `model_dir`) into `model_dir`.

    Returns:
        True when files were unpacked, False when this archive already was.

    Raises:
        UnsafeArchive: the archive path or one of its members leaves `model_dir`.
        FileNotFoundError: the archive is missing.
    """
    source = _inside(model_dir, archive)
    if not source.is_file():
        raise FileNotFoundError(f"The extra files archive {archive} is missing from {model_dir}")
    stamp = f"{source.stat().st_size}:{source.stat().st_mtime_ns}"
    marker = model_dir / f".{source.name}.unpacked"
    with _locked(model_dir / _LOCK_NAME):
        if marker.is_file() and marker.read_text() == stamp:
            return False
        _extract_and_merge(source, model_dir)
        marker.write_text(stamp)
    importlib.invalidate_caches()  # let imports see the new modules
    log.info("Unpacked %s into %s", archive, model_dir)
    return True


def _inside(model_dir: Path, relative: str) -> Path:
    root = model_dir.resolve()
    path = (root / relative).resolve()
    if path != root and root not in path.parents:
        raise UnsafeArchive(f"The extra files archive must be inside the model folder: {relative}")
    return path


def _extract_and_merge(source: Path, model_dir: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=model_dir))
    try:
        extract_mar(source, staging / "files")
        _merge(staging / "files", model_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _merge(source: Path, target: Path) -> None:
    """Move the tree `source` into `target`, replacing files that exist there."""
    for entry in source.iterdir():
        destination = target / entry.name
        if entry.is_dir() and not entry.is_symlink():
            if destination.is_dir() and not destination.is_symlink():
                _merge(entry, destination)
                continue
            _remove(destination)
        elif destination.is_dir() and not destination.is_symlink():
            shutil.rmtree(destination)
        os.replace(entry, destination)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `path` (no-op where `fcntl` is missing)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_installed(requirement: str) -> bool:
    """Whether the distribution (or module) a requirement names is already present."""
    match = _REQUIREMENT_NAME.match(requirement)
    if match is None:
        return False
    name = match.group(1)
    try:
        importlib.metadata.distribution(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return importlib.util.find_spec(name.replace("-", "_")) is not None
    except (ImportError, ValueError):
        return False


def pip_install(requirements: Sequence[str]) -> None:
    """`python -m pip install` the requirements into this interpreter."""
    command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]
    subprocess.run([*command, *requirements], check=True)


def install_missing(
    requirements: Sequence[str], installer: Callable[[Sequence[str]], None] | None = None
) -> list[str]:
    """Install (with `installer`, default `pip_install`) the requirements not installed yet.

    Returns:
        The requirements that were installed.
    """
    missing = [req for req in requirements if not is_installed(req)]
    if missing:
        log.info("Installing %s", ", ".join(missing))
        (installer or pip_install)(missing)
        importlib.invalidate_caches()
    return missing
