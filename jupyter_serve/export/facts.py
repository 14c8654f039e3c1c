"""What an exported archive says about running it elsewhere: requirements, its own Python.

`archive_facts(mar)` reads the manifest and the model-config.yaml of a `.mar` (the yaml
through the server's own safe loader, model_config.py) without extracting the rest:

* `requirements`: the archive ships a requirements file, so TorchServe needs
  `install_py_dep_per_model=true`;
* `kernel`: the version's workers ran in the Python of that Jupyter kernelspec
  (`jupyter_serve: {kernel: ...}`): its packages must be in the runtime's image;
* `notebook_only`: other settings of the `jupyter_serve:` section (`batchPolicy`,
  `torchThreads`) that TorchServe does not read;
* `sample`: the member that is an example request body, when the archive ships one
  (`sample_member`: named `sample*`, `example*`, `input*` or `request*`, a `.json`,
  `.txt`, `.jpg`, `.jpeg` or `.png` file of at most 1 MiB, JSON first);
* `language_model`: its handler is `causal_lm` (a Hugging Face causal LM folder), which
  KServe serves with its Hugging Face runtime (kserve.py, lm_archive.py).
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from jupyter_serve.archive import Manifest, ModelInfo, inspect_archive
from jupyter_serve.export.lm_handler import LM_HANDLER
from jupyter_serve.server.model_config import (
    CONFIG_NAME,
    MAX_CONFIG_BYTES,
    SECTION,
    ModelConfig,
    load_model_config,
)

__all__ = ["SAMPLE_SUFFIXES", "ArchiveFacts", "archive_facts", "sample_member"]

SAMPLE_STEMS = ("sample", "example", "input", "request")
SAMPLE_SUFFIXES = (".json", ".txt", ".jpg", ".jpeg", ".png")  # in order of preference
MAX_SAMPLE_BYTES = 1 << 20


@dataclass(frozen=True)
class ArchiveFacts:
    requirements: bool = False
    kernel: str | None = None
    notebook_only: tuple[str, ...] = ()  # jupyter_serve-only yaml settings, as "key: value"
    sample: str | None = None  # the archive member holding an example request body
    language_model: bool = False


def archive_facts(mar: Path) -> ArchiveFacts:
    """The facts of the `.mar` at `mar` (module docstring).

    Raises:
        ServeError: its manifest or yaml cannot be read.
    """
    listing = inspect_archive(mar)
    manifest = listing.manifest or Manifest.default_for(mar)
    config = _config(mar, manifest.model.config_file or CONFIG_NAME)
    section = config.data.get(SECTION) or {}
    other = tuple(f"{key}: {value}" for key, value in section.items() if key != "kernel")
    sample = sample_member(listing.files)
    return ArchiveFacts(bool(manifest.model.requirements_file), config.kernel, other, sample,
                        language_model=manifest.model.handler == LM_HANDLER)  # fmt: skip


def sample_member(files: Sequence[tuple[str, int]]) -> str | None:
    """The member (name, size) that is an example request body (module docstring)."""
    found = [
        name
        for name, size in files
        if size <= MAX_SAMPLE_BYTES
        and PurePosixPath(name).suffix.lower() in SAMPLE_SUFFIXES
        and PurePosixPath(name).stem.lower().startswith(SAMPLE_STEMS)
    ]
    found.sort(key=lambda name: SAMPLE_SUFFIXES.index(PurePosixPath(name).suffix.lower()))
    return found[0] if found else None


def _config(mar: Path, member: str) -> ModelConfig:
    """The archive's yaml, loaded as a worker's server loads it (limits included)."""
    with zipfile.ZipFile(mar) as archive, tempfile.TemporaryDirectory() as scratch:
        if member not in archive.namelist():
            return ModelConfig()
        folder = Path(scratch)
        with archive.open(member) as stream:
            (folder / CONFIG_NAME).write_bytes(stream.read(MAX_CONFIG_BYTES + 1))
        return load_model_config(folder, Manifest(model=ModelInfo()))
