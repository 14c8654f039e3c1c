"""Model snapshots: what is registered, written after every change and read back at start.

The file is TorchServe's `model_snapshot` JSON::

    {"name": "...-snapshot", "modelCount": N, "created": <epoch ms>,
     "models": {name: {version: {"defaultVersion", "marName", "minWorkers", "maxWorkers",
                                  "batchSize", "maxBatchDelay", "responseTimeout",
                                  "startupTimeout", "runtimeType", "jupyterServe": {...}}}}}

`maxBatchDelay` is in milliseconds, the timeouts in seconds, as TorchServe writes
them. The extra `jupyterServe` object holds what a restore needs beyond that:
the url to register again (a downloaded archive's local file) and the
effective handler, and the device the version ran on (`deviceType`,
`deviceIds`, for `jupyter serve export --snapshot`). `snapshot_items` reads the
same JSON from a `config.properties`' `model_snapshot`, where entries have no
`jupyterServe` object and `marName` names the archive in the model store.

Writes are atomic (a temporary file in the same folder, then `os.replace`). An
entry whose restore failed is kept as it was (`SnapshotItem.entry`, passed back as
`kept`), so a model that cannot come back on one start is not lost for the next.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_serve.server.models import ModelSpec, RegisterParams

__all__ = ["SnapshotItem", "read_snapshot", "snapshot_data", "snapshot_items", "write_snapshot"]


@dataclass(frozen=True)
class SnapshotItem:
    """One model version to register again: its url, parameters and workers."""

    url: str
    params: RegisterParams
    min_workers: int
    max_workers: int
    default: bool
    name: str = ""
    version: str = ""
    entry: dict[str, Any] = field(default_factory=dict)  # as read, to keep it if it fails


def snapshot_data(
    models: Iterable[tuple[ModelSpec, bool, str]], kept: Iterable[SnapshotItem] = ()
) -> dict[str, Any]:
    """The snapshot JSON of `(spec, is_default, url to register again)` triples, plus the
    `kept` entries (restores that failed) of versions not registered now."""
    created = int(time.time() * 1000)
    tree: dict[str, dict[str, Any]] = {}
    for item in kept:
        tree.setdefault(item.name, {})[item.version] = item.entry
    for spec, default, url in models:
        tree.setdefault(spec.model_name, {})[spec.version] = _entry(spec, default, url)
    return {
        "name": f"{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-snapshot",
        "modelCount": sum(len(versions) for versions in tree.values()),
        "created": created,
        "models": tree,
    }


def _entry(spec: ModelSpec, default: bool, url: str) -> dict[str, Any]:
    return {
        "defaultVersion": default,
        "marName": Path(spec.model_url).name,
        "minWorkers": spec.min_workers,
        "maxWorkers": spec.max_workers,
        "batchSize": spec.batch_size,
        "maxBatchDelay": round(spec.max_batch_delay * 1000),
        "responseTimeout": spec.response_timeout,
        "startupTimeout": spec.startup_timeout,
        "runtimeType": spec.runtime,
        "jupyterServe": {
            "url": url,
            "handler": spec.handler,
            "deviceType": spec.device_type.value,
            "deviceIds": list(spec.device_ids),
        },
    }


def write_snapshot(path: Path, data: dict[str, Any]) -> None:
    """Write `data` to `path` atomically: readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def read_snapshot(path: Path) -> list[SnapshotItem]:
    """The model versions a snapshot lists; none when there is no snapshot yet.

    Raises:
        ValueError: the file is not a snapshot (bad JSON or shape).
    """
    if not path.is_file():
        return []
    return snapshot_items(json.loads(path.read_text(encoding="utf-8")), str(path))


def snapshot_items(data: Any, origin: str = "the snapshot") -> list[SnapshotItem]:
    """The model versions of snapshot JSON `data`, by name then version.

    Raises:
        ValueError: `data` is not a snapshot (no `models` object of objects); the
            message names `origin`.
    """
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict) or not all(
        isinstance(versions, dict) and all(isinstance(entry, dict) for entry in versions.values())
        for versions in models.values()
    ):
        raise ValueError(f"{origin} is not a model snapshot: no 'models' object of versions.")
    return [
        _item(name, version, entry)
        for name, versions in sorted(models.items())
        for version, entry in sorted(versions.items())
    ]


def _item(name: str, version: str, entry: dict[str, Any]) -> SnapshotItem:
    extra = entry.get("jupyterServe")
    extra = extra if isinstance(extra, dict) else {}
    params = RegisterParams(
        model_name=name,
        handler=extra.get("handler"),
        runtime=entry.get("runtimeType"),
        batch_size=entry.get("batchSize"),
        max_batch_delay_ms=entry.get("maxBatchDelay"),
        initial_workers=entry.get("minWorkers", 0),
        response_timeout=entry.get("responseTimeout"),
        startup_timeout=entry.get("startupTimeout"),
    )
    return SnapshotItem(
        url=str(extra.get("url") or entry.get("marName") or ""),
        params=params,
        min_workers=int(entry.get("minWorkers", 0)),
        max_workers=int(entry.get("maxWorkers", entry.get("minWorkers", 0))),
        default=bool(entry.get("defaultVersion")),
        name=name,
        version=str(version),
        entry=entry,
    )
