"""Models a server brings up at start: the snapshot, then `load_models` (TorchServe's syntax).

`start_models(registry, plan)` runs in the server's event loop once it is up:

1. unless `plan.restore` is off (snapshots off, or a `config.properties` given,
   as `torchserve --ts-config` / `--ncs` do), the snapshot's models come back
   with their versions, settings and worker counts;
   a `config.properties` with a `model_snapshot` (`plan.snapshot`, what
   `jupyter serve export` writes) restores that one instead and, as TorchServe,
   reads no `load_models`; its `marName`s are archives in the model store;
2. every `load_models` entry is registered, skipping names already registered
   (restored from the snapshot). Its settings come from `models` (TorchServe's
   per-model JSON: `batchSize`, `maxBatchDelay`, `responseTimeout`,
   `startupTimeout`, `minWorkers`, `maxWorkers`); its workers from the
   archive's model-config.yaml, else `models`, else `startup_workers`.

TorchServe starts `default_workers_per_model` workers per startup model, which
defaults to the number of CPUs (or GPUs); jupyter_serve defaults to 1, so a
notebook server does not start a torch process per core for every model.

A model that fails is logged and skipped: the other models still start.
"""

from __future__ import annotations

import logging
import tarfile
import urllib.parse
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from jupyter_serve.archive import inspect_archive
from jupyter_serve.server.models import RegisterParams
from jupyter_serve.server.registry import ModelRegistry, snapshot_items
from jupyter_serve.server.registry.sources import archive_stem
from jupyter_serve.server.ts_config import parse_load_models
from jupyter_serve.wire.errors import ModelNotFound, ServeError

__all__ = ["StartupPlan", "model_identity", "start_models", "startup_workers"]

log = logging.getLogger(__name__)

ModelsJson = Mapping[str, Mapping[str, Mapping[str, Any]]]


@dataclass(frozen=True)
class StartupPlan:
    """What to bring up at start."""

    model_store: Path
    load_models: Sequence[str] = ()  # entries: `name=x.mar`, `x.mar`, `all`
    models: ModelsJson = field(default_factory=dict)
    default_workers: int = 0  # default_workers_per_model
    restore: bool = True
    snapshot: Mapping[str, Any] | None = None  # config.properties' model_snapshot


def startup_workers(default_workers: int) -> int:
    """Workers per startup model when neither its yaml nor `models` says: at least 1."""
    return max(1, default_workers)


async def start_models(registry: ModelRegistry, plan: StartupPlan) -> list[tuple[str, str]]:
    """Restore the snapshot, then register `load_models`; returns what is registered."""
    started: list[tuple[str, str]] = []
    if plan.restore:
        started.extend(await registry.restore())
    if plan.snapshot is not None:
        started.extend(await _restore_config_snapshot(registry, plan.snapshot))
        return started
    for name, url in _entries(plan):
        key = await _load_one(registry, plan, name, url)
        if key is not None:
            started.append(key)
    return started


async def _restore_config_snapshot(
    registry: ModelRegistry, snapshot: Mapping[str, Any]
) -> list[tuple[str, str]]:
    """The models of a config.properties' `model_snapshot`, as TorchServe restores them."""
    try:
        items = snapshot_items(snapshot, "config.properties' model_snapshot")
    except (ValueError, TypeError):
        log.exception("model_snapshot cannot be read")
        return []
    return await registry.restore(items)


def _entries(plan: StartupPlan) -> list[tuple[str | None, str]]:
    text = ",".join(entry.strip() for entry in plan.load_models if entry.strip())
    try:
        return parse_load_models(text, plan.model_store)
    except ValueError:
        log.exception("load_models %r cannot be read", text)
        return []


async def _load_one(
    registry: ModelRegistry, plan: StartupPlan, name: str | None, url: str
) -> tuple[str, str] | None:
    identity = model_identity(url, plan.model_store)
    name = name or identity[0]
    if _registered(registry, name):
        log.info("Startup model %s is registered already (restored): %s skipped", name, url)
        return None
    settings = _settings_for(plan.models, name, identity[1])
    try:
        await registry.register(url, _params(name, settings), synchronous=True)
        model = registry.get(name)
        low, high = _workers(model.spec.model_yaml_config, settings, plan.default_workers)
        await registry.scale(name, model.version, low, high, synchronous=True)
    except Exception:
        log.exception("Startup model %s (%s) failed to start", name, url)
        return None
    model.loaded_at_startup = True
    log.info("Startup model %s version %s serving with %d workers", name, model.version, low)
    return model.spec.key


def model_identity(url: str, model_store: Path) -> tuple[str, str | None]:
    """(model name, version) of a local archive, from its manifest; else from the url."""
    path = Path(url) if Path(url).is_absolute() else model_store / url
    try:
        stem = archive_stem(Path(PurePosixPath(urllib.parse.urlsplit(url).path).name or url))
    except ValueError:  # a url that does not parse: the register that follows says so
        stem = archive_stem(Path(url))
    try:
        manifest = inspect_archive(path).manifest
    except (OSError, ValueError, ServeError, zipfile.BadZipFile, tarfile.TarError):
        return stem, None  # the register that follows reports what is wrong with it
    if manifest is None:
        return stem, None
    return manifest.model.model_name or stem, manifest.model.model_version or None


def _registered(registry: ModelRegistry, name: str) -> bool:
    try:
        registry.get(name)
    except ModelNotFound:
        return False
    return True


def _settings_for(models: ModelsJson, name: str, version: str | None) -> Mapping[str, Any]:
    """The `models` entry of this version, or the name's only entry."""
    versions = models.get(name) or {}
    if version is not None and version in versions:
        return versions[version]
    return next(iter(versions.values())) if len(versions) == 1 else {}


def _params(name: str, settings: Mapping[str, Any]) -> RegisterParams:
    delay = _float(settings.get("maxBatchDelay"))
    return RegisterParams(
        model_name=name,
        initial_workers=0,  # scaled right after, once the yaml is known
        batch_size=_int(settings.get("batchSize")),
        max_batch_delay_ms=delay,
        response_timeout=_float(settings.get("responseTimeout")),
        startup_timeout=_float(settings.get("startupTimeout")),
    )


def _workers(
    yaml_config: Mapping[str, Any], settings: Mapping[str, Any], default_workers: int
) -> tuple[int, int]:
    """TorchServe's order: a valid yaml minWorkers/maxWorkers, then `models`, then default."""
    yaml_low, yaml_high = _int(yaml_config.get("minWorkers")), _int(yaml_config.get("maxWorkers"))
    if yaml_low and (yaml_high is None or yaml_high >= yaml_low):
        return yaml_low, yaml_high or yaml_low
    fallback = startup_workers(default_workers)
    low = _int(settings.get("minWorkers"))
    low = fallback if low is None else low
    high = _int(settings.get("maxWorkers"))
    return low, max(low, high if high is not None else low)


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _float(value: Any) -> float | None:
    number = _int(value)
    return None if number is None else float(number)
