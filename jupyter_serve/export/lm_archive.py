"""A language model's archive, made to run on TorchServe 0.12, and its folder for KServe.

`make_portable(mar, batch_size)` rewrites an archive whose manifest names the built-in
`causal_lm` handler (which TorchServe lacks) so that TorchServe runs it unchanged:

* `causal_lm.py`: the handler as one file (lm_handler.py), which TorchServe imports for
  the manifest's `causal_lm` (a handler file in the archive comes before a built-in one,
  in TorchServe as in jupyter_serve, so the manifest keeps its handler name and
  jupyter_serve still knows the model for a language model);
* the requirements file (`requirements.txt` unless the manifest names another): the
  archive's own lines, plus `REQUIREMENTS` for the packages they do not name;
* the model-config.yaml (the manifest's `configFile`, else `model-config.yaml`): the
  archive's text, plus what it does not set of `continuousBatching: true` (the handler's
  default here), `batchSize` (what the version served with) and `useVenv: true` (so
  TorchServe installs only what its own Python lacks: see the exported README).

An archive that ships its own `causal_lm.py` (not one this module wrote) ran that file,
and is left as it is. `write_model_folder(mar, dest)` writes what KServe's Hugging Face
runtime reads: the model folder (the `save_pretrained` files) without the archive's
manifest, handler, requirements and config.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from jupyter_serve.archive import Manifest, extract_mar, inspect_archive, pack_folder
from jupyter_serve.archive.manifest import MANIFEST_PATH
from jupyter_serve.export.lm_handler import (
    HANDLER_FILE,
    LM_HANDLER,
    AssemblyError,
    is_generated,
    standalone_handler,
)
from jupyter_serve.export.plan import NotExported
from jupyter_serve.server.model_config import CONFIG_NAME, find_config, load_yaml_file

__all__ = ["REQUIREMENTS", "REQUIREMENTS_NAME", "make_portable", "write_model_folder"]

# The ranges jupyter_serve's `llm` extra installs and its tests run (pyproject.toml;
# tests/test_export_lm.py checks they stay equal).
REQUIREMENTS = ("transformers>=5.23,<6", "tokenizers>=0.21")
REQUIREMENTS_NAME = "requirements.txt"
ADDED_NOTE = "# Added by `jupyter serve export` for TorchServe 0.12:"


def make_portable(mar: Path, batch_size: int) -> bool:
    """Rewrite the `causal_lm` archive `mar` in place (module docstring); False when it is
    no such archive, or ships its own handler file.

    Raises:
        NotExported: the handler cannot be assembled (a jupyter_serve bug, named).
        ServeError, OSError: the archive cannot be read or written.
    """
    manifest = inspect_archive(mar).manifest or Manifest.default_for(mar)
    if manifest.model.handler != LM_HANDLER:
        return False
    try:
        handler = standalone_handler()
    except AssemblyError as error:
        raise NotExported(f"its causal_lm handler cannot be made standalone: {error}") from None
    with tempfile.TemporaryDirectory(prefix=".lm-", dir=mar.parent) as scratch:
        folder = extract_mar(mar, Path(scratch) / "model")
        own = folder / HANDLER_FILE
        if own.is_file() and not is_generated(own.read_text(encoding="utf-8", errors="replace")):
            return False
        own.write_text(handler, encoding="utf-8")
        requirements = manifest.model.requirements_file or REQUIREMENTS_NAME
        _write_requirements(folder / requirements)
        config = _write_config(folder, manifest, batch_size)
        info = dataclasses.replace(manifest.model, requirements_file=requirements,
                                   config_file=config)  # fmt: skip
        pack_folder(folder, mar, dataclasses.replace(manifest, model=info))
    return True


def _write_requirements(path: Path) -> None:
    """The archive's requirements plus ours for the packages they do not name."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    named = {_package(line) for line in text.splitlines()}
    missing = [line for line in REQUIREMENTS if _package(line) not in named]
    if not missing:
        return
    lines = [text.rstrip("\n")] if text.strip() else []
    lines += [ADDED_NOTE, *missing]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _package(line: str) -> str | None:
    """The normalized package name a requirements line names (None: no package)."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split("#", 1)[0])
    return re.sub(r"[-_.]+", "-", found.group(1)).lower() if found else None


def _write_config(folder: Path, manifest: Manifest, batch_size: int) -> str:
    """The model-config.yaml with the settings it lacks appended; its name in the folder."""
    path = find_config(folder, manifest) or folder / CONFIG_NAME
    data: dict[str, Any] = load_yaml_file(path) if path.is_file() else {}
    wanted = {"continuousBatching": True, "batchSize": batch_size, "useVenv": True}
    missing = {key: value for key, value in wanted.items() if data.get(key) is None}
    if missing:
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        added = yaml.safe_dump(missing, sort_keys=False)
        merged = (text.rstrip("\n") + "\n" if text.strip() else "") + f"{ADDED_NOTE}\n{added}"
        if yaml.safe_load(merged) != {**data, **missing}:  # not one block mapping: rewrite it
            merged = f"{ADDED_NOTE}\n" + yaml.safe_dump({**data, **missing}, sort_keys=False)
        path.write_text(merged, encoding="utf-8")
    return path.relative_to(folder).as_posix()


def write_model_folder(mar: Path, dest: Path) -> None:
    """The model folder of the language model archive `mar`, as `dest` (module docstring).

    Raises:
        ServeError, OSError: the archive cannot be read, or `dest` written.
    """
    manifest = inspect_archive(mar).manifest or Manifest.default_for(mar)
    with tempfile.TemporaryDirectory(prefix=".hf-", dir=dest.parent) as scratch:
        folder = extract_mar(mar, Path(scratch) / "model")
        shutil.rmtree(folder / MANIFEST_PATH.split("/")[0], ignore_errors=True)
        model = manifest.model
        for name in (HANDLER_FILE, model.requirements_file, model.config_file):
            if name:
                (folder / name).unlink(missing_ok=True)
        os.replace(folder, dest)
