"""`ModelRegistry`: the registered model versions, each a `Model` (spec + batcher + pool).

Runs in the Jupyter server process (no tornado, no torch). Every method follows
TorchServe's management API: its status codes and, where a client may compare
them, its exact messages (TorchServe 0.12's management API). Methods that change what is
registered return `(status, message)`; the routes wrap the message as
`{"status": message}`. Failures raise `ServeError` subclasses.

Archives are extracted into `<workdir>/<name>/<version>-<uuid>` (see `workdir`;
removed again on unregister and shutdown); a no-archive folder is used in place.
After every change a snapshot goes to `<workdir>/snapshot.json` (see `snapshot`),
and `restore()` registers its models again at start.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_serve.archive import ExtractLimits
from jupyter_serve.server.batching import Batcher, no_worker_message
from jupyter_serve.server.models import ModelSpec, RegisterParams, ServerDefaults
from jupyter_serve.server.pool import WorkerPool
from jupyter_serve.server.registry.describe import MAX_PAGE, describe_model, model_page
from jupyter_serve.server.registry.snapshot import (
    SnapshotItem,
    read_snapshot,
    snapshot_data,
    write_snapshot,
)
from jupyter_serve.server.registry.sources import MAX_DOWNLOAD_SIZE, Source, SourcePolicy, locate
from jupyter_serve.server.registry.start_failure import start_failure
from jupyter_serve.server.registry.workdir import (
    install_model_requirements,
    prepare_model,
    remove_paths,
)
from jupyter_serve.server.sequences import SequenceBatcher
from jupyter_serve.wire.errors import (
    BadRequest,
    ConflictStatus,
    InvalidModelVersion,
    ModelNotFound,
    ModelVersionNotFound,
    ServiceUnavailable,
)

__all__ = ["Model", "ModelRegistry", "PoolFactory", "RegistryConfig"]

log = logging.getLogger(__name__)

PoolFactory = Callable[[ModelSpec, Batcher], WorkerPool]
ASYNC_MESSAGE = "Processing worker updates..."


@dataclass(frozen=True)
class RegistryConfig:
    """Server settings the registry needs (TorchServe's config.properties subset).

    `allowed_urls` are regexes a whole http(s) url must match to be downloaded;
    empty (the default) refuses every download. The other url rules (local paths,
    download size) are `sources.SourcePolicy`'s; `extract_limits` bound archives.
    """

    model_store: Path
    workdir: Path
    defaults: ServerDefaults = field(default_factory=ServerDefaults)
    allowed_urls: tuple[str, ...] = ()
    max_download_size: int = MAX_DOWNLOAD_SIZE
    allow_local_paths: bool = False
    workspace_root: Path | None = None  # the Jupyter server's root: its jupyter_serve_work folders
    extract_limits: ExtractLimits = field(default_factory=ExtractLimits)
    install_py_dep_per_model: bool = False
    pip_args: tuple[str, ...] = ()
    env_withheld: tuple[str, ...] = ()  # ServeApp.worker_env_withheld: not for pip either
    snapshots: bool = True
    gpus: int | None = None  # GPUs the server may use; None asks devices.gpu_count()
    pool_factory: PoolFactory = WorkerPool
    on_drop: Callable[[str, str], None] | None = None  # (name, version) is gone: forget stats


@dataclass(eq=False)
class Model:
    """One registered model version and what serves it."""

    spec: ModelSpec
    batcher: Batcher
    pool: WorkerPool
    restore_url: str  # what a restore registers (a downloaded archive's local file)
    extracted: Path | None = None  # the folder we extracted into (ours to remove)
    downloaded: Path | None = None  # the archive we downloaded (ours to remove)
    loaded_at_startup: bool = False
    registered_at: float = field(default_factory=time.time)

    @property
    def name(self) -> str:
        return self.spec.model_name

    @property
    def version(self) -> str:
        return self.spec.version


class ModelRegistry:
    """(model name, version) -> `Model`, with one default version per name."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        self._models: dict[tuple[str, str], Model] = {}
        self._defaults: dict[str, str] = {}
        self._reserved: set[tuple[str, str]] = set()
        self._restoring = False
        self._failed_logs: dict[str, list[str]] = {}  # worker output of a failed register
        self._kept: dict[tuple[str, str], SnapshotItem] = {}  # snapshot entries not restored

    @property
    def snapshot_path(self) -> Path:
        return self.config.workdir / "snapshot.json"

    # ---- lookups -------------------------------------------------------------

    def get(self, name: str, version: str | None = None) -> Model:
        """The model version (the default one when `version` is None)."""
        if name not in self._defaults:
            raise ModelNotFound(f"Model not found: {name}")
        wanted = version or self._defaults[name]
        model = self._models.get((name, wanted))
        if model is None:
            raise ModelVersionNotFound(f"Model version: {wanted} does not exist for model: {name}")
        return model

    def names(self) -> list[str]:
        """Every registered model name, sorted."""
        return sorted(self._defaults)

    def versions(self, name: str) -> list[Model]:
        """Every registered version of `name`, by version string."""
        found = [model for (model_name, _), model in self._models.items() if model_name == name]
        return sorted(found, key=lambda model: model.version)

    def only_startup_model(self) -> str | None:
        """The name of the one model loaded at startup, when exactly one was (`invocations`)."""
        names = {model.name for model in self._models.values() if model.loaded_at_startup}
        return names.pop() if len(names) == 1 else None

    def default_version(self, name: str) -> str:
        return self.get(name).version

    def list_models(self, limit: int = MAX_PAGE, next_page_token: int = 0) -> dict[str, Any]:
        """TorchServe's `GET /models` body: one entry per name (its default version's url)."""
        entries = [
            (name, self._models[(name, version)].spec.model_url)
            for name, version in sorted(self._defaults.items())
        ]
        return model_page(entries, limit, next_page_token)

    def describe(self, name: str, version: str | None = None) -> list[dict[str, Any]]:
        """TorchServe's describe array: the default version, one version, or "all"."""
        if version == "all":
            self.get(name)
            return [describe_model(model) for model in self.versions(name)]
        return [describe_model(self.get(name, version))]

    def healthy(self) -> bool:
        """TorchServe's ping: every default version has min_workers healthy workers.

        Healthy as TorchServe counts it (`WorkerPool.ping_healthy_count`): loading,
        serving, or failing for less than the model's `maxRetryTimeoutInSec`.
        """
        defaults = (self._models[key] for key in self._defaults.items())
        return all(model.pool.ping_healthy_count >= model.spec.min_workers for model in defaults)

    # ---- register ------------------------------------------------------------

    async def register(
        self, url: str, params: RegisterParams | None = None, *, synchronous: bool = True
    ) -> tuple[int, str]:
        """Register the model `url` names and start its initial workers."""
        _, status, message = await self._register(url, params or RegisterParams(), synchronous)
        return status, message

    async def _register(
        self, url: str, params: RegisterParams, synchronous: bool
    ) -> tuple[Model, int, str]:
        source = await locate(url, self.config.model_store, SourcePolicy.of(self.config))
        try:
            spec, extracted = await prepare_model(self.config, url, source, params)
        except BaseException:
            remove_paths(source.downloaded)
            raise
        try:
            model = await self._admit(spec, source, extracted)
        except BaseException:
            await asyncio.to_thread(remove_paths, extracted, source.downloaded)
            raise
        status, message = await self._start_initial(model, synchronous)
        return model, status, message

    async def _admit(self, spec: ModelSpec, source: Source, extracted: Path | None) -> Model:
        """Reserve the name and version, install requirements, add the model."""
        key = spec.key
        if key in self._models or key in self._reserved:
            raise ConflictStatus(
                f"Model version {spec.version} is already registered for model {spec.model_name}"
            )
        self._reserved.add(key)
        try:
            spec = await install_model_requirements(self.config, spec)
        finally:
            self._reserved.discard(key)
        batcher = SequenceBatcher(spec) if spec.sequence_batching else Batcher.for_spec(spec)
        restore_url = str(source.downloaded) if source.downloaded else spec.model_url
        model = Model(spec, batcher, self.config.pool_factory(spec, batcher), restore_url)
        model.extracted, model.downloaded = extracted, source.downloaded
        self._models[key] = model
        self._defaults.setdefault(spec.model_name, spec.version)
        return model

    async def _start_initial(self, model: Model, synchronous: bool) -> tuple[int, str]:
        spec = model.spec
        head = f'Model "{spec.model_name}" Version: {spec.version} registered with'
        if spec.min_workers == 0:  # nothing to wait for: TorchServe answers 200 either way
            self._save()
            advice = "Use scale workers API to add workers for the model."
            return 200, f"{head} 0 initial workers. {advice}"
        if not synchronous:
            await model.pool.scale(spec.min_workers, spec.max_workers, wait=False)
            self._save()
            return 202, ASYNC_MESSAGE
        result = await model.pool.scale(spec.min_workers, spec.max_workers)
        if not result.ok:
            # Keep what the workers printed (their tracebacks): `logs()` shows it afterwards.
            self._failed_logs[spec.model_name] = model.pool.recent_logs()
            await self._drop(model)
            raise start_failure(result, spec.model_name, spec.version)
        self._save()
        return 200, f"{head} {spec.min_workers} initial workers"

    # ---- scale, default, unregister -------------------------------------------

    async def scale(
        self,
        name: str,
        version: str | None = None,
        min_worker: int = 1,
        max_worker: int | None = None,
        synchronous: bool = False,
    ) -> tuple[int, str]:
        """Set the model version's worker counts; TorchServe's 200/202/206/400/404/500.

        A synchronous scale waits for the workers it adds, then answers 200 when at least
        `min_worker` workers are starting or serving (TorchServe's `scaleRequestStatus`
        counts every worker not stopped or in error), and 206 when some are restarting.
        """
        model = self.get(name, version)
        max_worker = min_worker if max_worker is None else max_worker
        if max_worker < min_worker:
            raise BadRequest("max_worker cannot be less than min_worker.")
        model.spec = model.spec.with_changes(min_workers=min_worker, max_workers=max_worker)
        result = await model.pool.scale(min_worker, max_worker, wait=synchronous)
        self._save()
        if not synchronous:
            return 202, ASYNC_MESSAGE
        if not result.ok:
            raise start_failure(result, name, version or "null")
        if len(model.pool.workers) < min_worker:  # starting ones count, as in TorchServe
            return 206, "Workers scaling in progress..."
        named = f"model: {name}" if version is None else f"model: {name}, version: {version}"
        return 200, f"Workers scaled to {min_worker} for {named}"

    def logs(self, name: str, version: str | None = None, limit: int | None = None) -> list[str]:
        """Recent worker output of a model, or of its last failed register."""
        if name not in self._defaults and name in self._failed_logs:
            lines = self._failed_logs[name]
            return lines if limit is None else lines[-limit:] if limit > 0 else []
        return self.get(name, version).pool.recent_logs(limit)

    def set_default(self, name: str, version: str) -> tuple[int, str]:
        """Make `version` the version that unversioned routes use."""
        self.get(name)
        if (name, version) not in self._models:
            raise ModelVersionNotFound(f"Model version {version} does not exist for model {name}")
        self._defaults[name] = version
        self._save()
        return 200, f'Default version successfully updated for model "{name}" to "{version}"'

    async def unregister(self, name: str, version: str | None = None) -> tuple[int, str]:
        """Stop and remove a model version (the default one when `version` is None)."""
        model = self.get(name, version)
        is_default = self._defaults[name] == model.version
        if is_default and len(self.versions(name)) > 1:
            raise InvalidModelVersion(f"Cannot remove default version for model {name}")
        await self._drop(model)
        self._save()
        return 200, f'Model "{name}" unregistered'

    async def _drop(self, model: Model) -> None:
        """Forget `model`, stop its workers, remove the files we made for it."""
        self._models.pop(model.spec.key, None)
        if self._defaults.get(model.name) == model.version:
            del self._defaults[model.name]
        if self.config.on_drop is not None:
            self.config.on_drop(model.name, model.version)
        await _dispose(model)
        await asyncio.to_thread(remove_paths, model.downloaded)

    # ---- life cycle ----------------------------------------------------------

    async def shutdown(self) -> None:
        """Stop every worker and remove extracted folders; the snapshot stays as it is."""
        models = list(self._models.values())
        self._models.clear()
        self._defaults.clear()
        await asyncio.gather(*(_dispose(model) for model in models))

    async def restore(
        self, items: list[SnapshotItem] | None = None, *, synchronous: bool = True
    ) -> list[tuple[str, str]]:
        """Register the snapshot's models again (or `items`: a config.properties'
        `model_snapshot`); failures are logged. Returns what came back."""
        if items is None and not self.config.snapshots:
            return []
        try:
            items = read_snapshot(self.snapshot_path) if items is None else items
        except (OSError, ValueError):
            log.exception("Cannot read the model snapshot %s", self.snapshot_path)
            return []
        restored: list[tuple[str, str]] = []
        self._restoring = True
        try:
            for item in items:
                model = await self._restore_one(item, synchronous)
                if model is not None:
                    restored.append(model.spec.key)
        finally:
            self._restoring = False
        self._save()
        return restored

    async def _restore_one(self, item: SnapshotItem, synchronous: bool) -> Model | None:
        """Register one snapshot entry again; a failure is one log line, and the entry is
        kept in the snapshot (`_kept`) for a later start where it may work again."""
        try:
            model, _, _ = await self._register(item.url, item.params, synchronous)
            await model.pool.scale(item.min_workers, item.max_workers, wait=False)
        except Exception as exc:
            log.error("Restoring model %s from %s failed (kept in the snapshot): %s",
                      item.params.model_name, item.url, _one_line(exc))  # fmt: skip
            self._kept[(item.name, item.version)] = item
            return None
        model.spec = model.spec.with_changes(max_workers=item.max_workers)
        model.loaded_at_startup = True
        if item.default:
            self._defaults[model.name] = model.version
        return model

    def _save(self) -> None:
        """Write the snapshot (unless off or restoring); a failed write is only logged."""
        if not self.config.snapshots or self._restoring:
            return
        models = [
            (model.spec, self._defaults.get(model.name) == model.version, model.restore_url)
            for model in self._models.values()
        ]
        kept = [item for key, item in self._kept.items() if key not in self._models]
        try:
            write_snapshot(self.snapshot_path, snapshot_data(models, kept))
        except OSError:
            log.exception("Cannot write the model snapshot %s", self.snapshot_path)


def _one_line(exc: BaseException) -> str:
    """An error as one short log line (its type and first line), never a traceback."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


async def _dispose(model: Model) -> None:
    """Fail queued requests, stop the workers, remove the extracted folder."""
    model.batcher.close(ServiceUnavailable(no_worker_message(model.name, model.version)))
    await model.pool.stop()
    await asyncio.to_thread(remove_paths, model.extracted)
