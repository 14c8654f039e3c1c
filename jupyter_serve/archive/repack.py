"""A model version's archive as the version runs: the `.mar` it came from, or one packed anew.

What `jupyter serve export` (and the server's `GET models/{m}/{v}/archive`) need:

* `holds_version(path, version, handler)`: the file is a zip `.mar` whose manifest has
  this version and names this handler, so it can be copied as it is;
* `running_manifest(manifest, name, version, handler)`: the manifest naming the handler
  the version runs (a register may override it) and its version and name (a folder
  without a manifest has neither, and TorchServe requires both);
* `repack(source, target, manifest)`: `target` packed from `source`, a model folder or
  an archive (`.mar`, `.tar.gz`: extracted safely to a temporary folder first).
"""

from __future__ import annotations

import dataclasses
import tarfile
import tempfile
import zipfile
from pathlib import Path

from jupyter_serve.archive.build import pack_folder
from jupyter_serve.archive.extract import ExtractLimits, extract_mar, inspect_archive
from jupyter_serve.archive.manifest import Manifest
from jupyter_serve.wire.errors import ServeError

__all__ = ["holds_version", "repack", "running_manifest"]


def holds_version(path: Path, version: str, handler: str) -> bool:
    """Whether `path` is a zip `.mar` of `version` whose manifest names `handler`."""
    if not (path.is_file() and path.name.endswith(".mar") and zipfile.is_zipfile(path)):
        return False
    try:
        manifest = inspect_archive(path).manifest
    except (OSError, ValueError, ServeError, zipfile.BadZipFile, tarfile.TarError):
        return False
    if manifest is None:
        return False
    return manifest.model.model_version == version and manifest.model.handler == handler


def running_manifest(manifest: Manifest, name: str, version: str, handler: str) -> Manifest:
    """`manifest` with the handler and version the version runs (and a name if it had none)."""
    info = dataclasses.replace(
        manifest.model,
        model_name=manifest.model.model_name or name,
        model_version=version,
        handler=handler,
    )
    return dataclasses.replace(manifest, model=info)


def repack(
    source: Path, target: Path, manifest: Manifest, limits: ExtractLimits | None = None
) -> Path:
    """Pack the model folder or archive `source` into the `.mar` `target` with `manifest`.

    Raises:
        ArchiveError: `source` is an archive that cannot be read (or unsafe).
        FileNotFoundError: `source` is gone.
    """
    if source.is_dir():
        return pack_folder(source, target, manifest)
    if not source.is_file():
        raise FileNotFoundError(f"No such file or directory: {source}")
    with tempfile.TemporaryDirectory(prefix=".repack-", dir=target.parent) as scratch:
        folder = extract_mar(source, Path(scratch) / "model", limits=limits)
        return pack_folder(folder, target, manifest)
