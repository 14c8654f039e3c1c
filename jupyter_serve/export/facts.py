"""What an exported archive says about running it elsewhere: requirements, its own Python.

`archive_facts(mar)` reads the manifest and the model-config.yaml of a `.mar` (the yaml
through the server's own safe loader, model_config.py) without extracting the rest:

* `requirements`: the archive ships a requirements file, so TorchServe needs
  `install_py_dep_per_model=true`;
* `kernel`: the version's workers ran in the Python of that Jupyter kernelspec
  (`jupyter_serve: {kernel: ...}`): its packages must be in the runtime's image;
* `notebook_only`: other settings of the `jupyter_serve:` section (`batchPolicy`,
  `torchThreads`) that TorchServe does not read.
"""

from __future__ import annotations

import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..archive import Manifest, ModelInfo, inspect_archive
from ..model_config import CONFIG_NAME, MAX_CONFIG_BYTES, SECTION, ModelConfig, load_model_config

__all__ = ["ArchiveFacts", "archive_facts"]


@dataclass(frozen=True)
class ArchiveFacts:
    requirements: bool = False
    kernel: str | None = None
    notebook_only: tuple[str, ...] = ()  # jupyter_serve-only yaml settings, as "key: value"


def archive_facts(mar: Path) -> ArchiveFacts:
    """The facts of the `.mar` at `mar` (module docstring).

    Raises:
        ServeError: its manifest or yaml cannot be read.
    """
    manifest = inspect_archive(mar).manifest or Manifest.default_for(mar)
    config = _config(mar, manifest.model.config_file or CONFIG_NAME)
    section = config.data.get(SECTION) or {}
    other = tuple(f"{key}: {value}" for key, value in section.items() if key != "kernel")
    return ArchiveFacts(bool(manifest.model.requirements_file), config.kernel, other)


def _config(mar: Path, member: str) -> ModelConfig:
    """The archive's yaml, loaded as a worker's server loads it (limits included)."""
    with zipfile.ZipFile(mar) as archive, tempfile.TemporaryDirectory() as scratch:
        if member not in archive.namelist():
            return ModelConfig()
        folder = Path(scratch)
        with archive.open(member) as stream:
            (folder / CONFIG_NAME).write_bytes(stream.read(MAX_CONFIG_BYTES + 1))
        return load_model_config(folder, Manifest(model=ModelInfo()))
