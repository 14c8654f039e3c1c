"""The archive a registered model version serves from, as one `.mar` (what export copies).

`served_archive(model, config)` finds it:

* the archive the version was registered from, as it is, when that file is still a
  `.mar` (a zip) where it was, of this version, naming the handler the version runs;
* else a `.mar` packed from the folder the version serves from (its extracted
  archive, or its no-archive folder) with the handler it runs in the manifest: a
  folder model, a `.tar.gz`, a register that overrode the handler, an archive
  replaced or removed since;
* `ModelNotFound` when neither is left ("its files are gone").

A packed archive is written under `<workdir>/.export/` and is the caller's to remove
(`ServedArchive.temporary`).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path

from jupyter_serve.archive import Manifest, holds_version, pack_folder, running_manifest
from jupyter_serve.server.registry.registry import Model, RegistryConfig
from jupyter_serve.server.registry.sources import SourcePolicy, locate
from jupyter_serve.wire.errors import ModelNotFound, ServeError

__all__ = ["ServedArchive", "served_archive"]

SCRATCH = ".export"  # under the workdir: archives packed for one request


@dataclass(frozen=True)
class ServedArchive:
    """A `.mar` of the version; `temporary` when packed for this request (remove it)."""

    path: Path
    temporary: bool


async def served_archive(model: Model, config: RegistryConfig) -> ServedArchive:
    """The version's archive (module docstring)."""
    spec = model.spec
    original = await _original(model, config)
    if original is not None and holds_version(original, spec.version, spec.handler):
        return ServedArchive(original, temporary=False)
    folder = Path(spec.model_dir)
    if not folder.is_dir():
        raise ModelNotFound(
            f"The files of model {model.name} version {model.version} are gone: "
            f"{spec.model_url} (neither the archive nor its extracted folder is left)"
        )
    scratch = config.workdir / SCRATCH
    scratch.mkdir(parents=True, exist_ok=True)
    target = scratch / f"{model.name}-{uuid.uuid4().hex}.mar"
    manifest = running_manifest(
        Manifest.from_dict(spec.manifest), model.name, spec.version, spec.handler
    )
    await asyncio.to_thread(pack_folder, folder, target, manifest)
    return ServedArchive(target, temporary=True)


async def _original(model: Model, config: RegistryConfig) -> Path | None:
    """The file the version was registered from, if it is still there."""
    if model.extracted is None:  # registered from a folder, used in place
        return None
    try:
        source = await locate(model.restore_url, config.model_store, SourcePolicy.of(config))
    except ServeError:
        return None
    return source.path
