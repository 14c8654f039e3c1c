"""`MAR-INF/MANIFEST.json`: the manifest of a model archive, read and written.

Written exactly as torch-model-archiver 0.12 writes it: `json.dumps(indent=2)`,
keys in this order, absent values left out (never written as null)::

    {
      "createdOn": "22/11/2026 04:09:32",      # day/month/year, local time
      "runtime": "python",                      # python | python3 | LSP
      "model": {
        "modelName": "mnist",
        "serializedFile": "mnist_cnn.pt",       # basename; omitted if absent
        "handler": "mnist_handler.py",          # basename of --handler, ":fn" kept
        "modelFile": "mnist.py",                # omitted if absent
        "modelVersion": "1.0",
        "requirementsFile": "requirements.txt", # omitted if absent
        "configFile": "model-config.yaml"       # omitted if absent
      },
      "archiverVersion": "0.12.0"
    }

Read leniently, as TorchServe's frontend reads it: unknown keys are kept but
ignored, so old Multi Model Server manifests (`modelServerVersion`, `engine`,
`license`, `publisher`, ...) load; a folder without a manifest gets a default one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from jupyter_serve.wire.errors import ArchiveError

MANIFEST_PATH = "MAR-INF/MANIFEST.json"
RUNTIMES = ("python", "python3", "LSP")
MAX_NAME_LENGTH = 128  # model names and versions: folder names under the workdir
MODEL_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-.]*")
CREATED_ON_FORMAT = "%d/%m/%Y %H:%M:%S"
MAX_MANIFEST_BYTES = 1024**2  # a real manifest is under 1 KiB

# (attribute, JSON key) in the order torch-model-archiver writes them.
_MODEL_KEYS = (
    ("model_name", "modelName"),
    ("serialized_file", "serializedFile"),
    ("handler", "handler"),
    ("model_file", "modelFile"),
    ("model_version", "modelVersion"),
    ("extensions", "extensions"),
    ("requirements_file", "requirementsFile"),
    ("config_file", "configFile"),
)


def check_model_name(name: str) -> None:
    """Refuse a model name TorchServe would refuse (`^[A-Za-z0-9][A-Za-z0-9_\\-.]*$`), or
    one longer than `MAX_NAME_LENGTH` (it names folders: the file system has a limit)."""
    if len(name or "") > MAX_NAME_LENGTH:
        raise ArchiveError(
            f"Model name is too long: {len(name)} characters (at most {MAX_NAME_LENGTH})."
        )
    if not MODEL_NAME_PATTERN.fullmatch(name or ""):
        raise ArchiveError(
            "Model name contains special characters.\n"
            "The allowed regular expression filter for model name is: "
            "^[A-Za-z0-9][A-Za-z0-9_\\-.]*$"
        )


@dataclass(frozen=True)
class ModelInfo:
    """The `model` section of a manifest."""

    model_name: str | None = None
    handler: str | None = None
    model_version: str | None = None
    serialized_file: str | None = None
    model_file: str | None = None
    requirements_file: str | None = None
    config_file: str | None = None
    extensions: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {key: getattr(self, attr) for attr, key in _MODEL_KEYS}
        out = {key: value for key, value in out.items() if value}
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelInfo:
        known = {key: attr for attr, key in _MODEL_KEYS}
        values = {known[k]: _text(k, v) for k, v in data.items() if k in known}
        extra = {k: v for k, v in data.items() if k not in known}
        # MMS 0.4 / early TorchServe manifests spell the version "version".
        if values.get("model_version") is None and isinstance(extra.get("version"), str):
            values["model_version"] = extra["version"]
        return cls(**values, extra=extra)


def _text(key: str, value: Any) -> Any:
    """A manifest's string field as TorchServe's Gson reads it: a number becomes its text
    (`"modelVersion": 1.0`), anything else but a string or null is refused."""
    if key == "extensions" or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ArchiveError(f"Invalid manifest: model.{key} must be a string.")


@dataclass(frozen=True)
class Manifest:
    """A whole `MANIFEST.json`; `extra` keeps keys of other writers (MMS) untouched."""

    model: ModelInfo
    runtime: str = "python"
    created_on: str | None = None
    archiver_version: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.created_on:
            out["createdOn"] = self.created_on
        out["runtime"] = self.runtime
        out["model"] = self.model.to_dict()
        if self.archiver_version:
            out["archiverVersion"] = self.archiver_version
        out.update(self.extra)
        return out

    def to_json(self) -> str:
        """The manifest text, formatted as torch-model-archiver formats it."""
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        if not isinstance(data, dict):
            raise ArchiveError("Invalid manifest: expected a JSON object.")
        model = data.get("model")
        if not isinstance(model, dict):
            raise ArchiveError("Missing Model entry in manifest file.")
        known = {"createdOn", "runtime", "model", "archiverVersion"}
        return cls(
            model=ModelInfo.from_dict(model),
            runtime=str(data.get("runtime") or "python"),
            created_on=data.get("createdOn"),
            archiver_version=data.get("archiverVersion"),
            extra={k: v for k, v in data.items() if k not in known},
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        """Parse a manifest: at most `MAX_MANIFEST_BYTES`, nesting bounded by the parser."""
        if len(text) > MAX_MANIFEST_BYTES:
            raise ArchiveError(f"Invalid manifest: over {MAX_MANIFEST_BYTES} bytes.")
        try:
            data = json.loads(text)
        except RecursionError as exc:
            raise ArchiveError("Invalid manifest: nested too deeply.") from exc
        except ValueError as exc:
            raise ArchiveError(f"Invalid manifest: {exc}") from exc
        return cls.from_dict(data)

    @classmethod
    def default_for(cls, folder: Path) -> Manifest:
        """The manifest TorchServe assumes for a folder without one."""
        return cls(model=ModelInfo(model_name=folder.name, model_version="1.0"))

    @property
    def is_mms(self) -> bool:
        """True for a Multi Model Server manifest (it carries `modelServerVersion`)."""
        return "modelServerVersion" in self.extra or "engine" in self.extra


def now_created_on() -> str:
    """`createdOn` for a manifest written now (torch-model-archiver's local-time format)."""
    return datetime.now().strftime(CREATED_ON_FORMAT)


def read_manifest(model_dir: str | Path) -> Manifest:
    """The manifest of an extracted archive or a `no-archive` folder, or the default one."""
    folder = Path(model_dir)
    path = folder / MANIFEST_PATH
    if not path.is_file():
        return Manifest.default_for(folder)
    with open(path, "rb") as stream:
        return Manifest.from_json(stream.read(MAX_MANIFEST_BYTES + 1))
