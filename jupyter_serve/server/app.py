"""`ServeApp`: the jupyter_server extension that serves models under `{base_url}serve/`.

The server process never runs model code: it owns the routes, the model
registry (one batcher and worker pool per model version), the metrics and the
worker factory (`fork_workers`: one warm interpreter that forks every model's workers).
Routes reach them through tornado settings:

* ``serve_registry``: the `ModelRegistry`;
* ``serve_metrics``: the `ServeMetrics`;
* ``serve_app``: this `ServeApp` (limits such as `max_request_size`).

At start (`_start_jupyter_server_extension`, or `start_models()` awaited
directly) the snapshot comes back and `load_models` are registered, in a
background task so the server answers at once (see `startup`).
`stop_extension` stops every worker and the factory, so nothing outlives the server.

`ts_config` names a TorchServe `config.properties`; its single-server keys
(`TS_CONFIG_TRAITS`) fill the traits the user did not set explicitly, which is
TorchServe's precedence: config.properties < Jupyter config and command line.
Its `model_snapshot`, when it has one, is restored at start (see `startup`).

The traits themselves (every `c.ServeApp.<name>`, its help and default) are
`ServeAppTraits` in app_config.py; this module holds what the server does with them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import url_path_join
from traitlets import TraitError, TraitType, default

from jupyter_serve.archive import ExtractLimits
from jupyter_serve.server.app_config import ServeAppTraits
from jupyter_serve.server.http import ROUTES
from jupyter_serve.server.http.access_log import quiet_successful_predictions
from jupyter_serve.server.http.admission import fast_path_token
from jupyter_serve.server.http.fastpath import fast_targets
from jupyter_serve.server.http.lane import Lane
from jupyter_serve.server.metrics.config import DEFAULT as DEFAULT_METRICS
from jupyter_serve.server.metrics.config import MetricsConfig, load_metrics_config
from jupyter_serve.server.metrics.serve_metrics import ServeMetrics
from jupyter_serve.server.models import BatchPolicy, ServerDefaults
from jupyter_serve.server.pool import WorkerFactory, WorkerPool
from jupyter_serve.server.registry import ModelRegistry, RegistryConfig
from jupyter_serve.server.startup import StartupPlan, start_models
from jupyter_serve.server.ts_config import apply_env_overrides, from_properties, read_properties
from jupyter_serve.wire.errors import BadRequest

# config.properties key -> ServeApp trait it fills (unless the trait was set explicitly).
TS_CONFIG_TRAITS = {
    "model_store": "model_store",
    "default_workers_per_model": "default_workers_per_model",
    "job_queue_size": "job_queue_size",
    "max_request_size": "max_request_size",
    "default_response_timeout": "response_timeout",
    "default_startup_timeout": "startup_timeout",
    "install_py_dep_per_model": "install_py_dep_per_model",
    "allowed_urls": "allowed_urls",
    "enable_model_api": "enable_model_api",
    "models": "models",
    "limit_max_image_pixels": "limit_max_image_pixels",
    "decode_input_request": "decode_input_request",
    "service_envelope": "service_envelope",
    "metrics_config": "metrics_config",
    "model_metrics_auto_detect": "model_metrics_auto_detect",
}


WORKER_LOGGER = logging.getLogger("jupyter_serve.worker")


def server_workdir(data_dir: Path, root_dir: str | None) -> Path:
    """The default work folder of the Jupyter server serving `root_dir`: one per root
    directory (its resolved path's hash, after its name for people reading the folder)."""
    root = Path(root_dir or ".").expanduser().resolve()
    digest = hashlib.sha256(str(root).encode("utf-8")).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", root.name)[:40] or "root"
    return data_dir / "jupyter_serve" / "servers" / f"{slug}-{digest}"


def show_worker_output(app_log: logging.Logger) -> list[logging.Handler]:
    """Print the workers' output (handler prints, tracebacks) where the server logs,
    as TorchServe's console shows its model log; returns the handlers it attached.

    Nothing changes when the worker logger was configured already (`logging_config`).
    """
    if WORKER_LOGGER.handlers:
        return []
    handlers = list(app_log.handlers)
    for handler in handlers:
        WORKER_LOGGER.addHandler(handler)
    if handlers:
        WORKER_LOGGER.setLevel(logging.INFO)
        WORKER_LOGGER.propagate = False
    return handlers


def hide_worker_output(handlers: list[logging.Handler]) -> None:
    """Undo `show_worker_output` (the server is stopping)."""
    for handler in handlers:
        WORKER_LOGGER.removeHandler(handler)
    if handlers:
        WORKER_LOGGER.propagate = True


class ServeApp(ServeAppTraits, ExtensionApp):
    """Serve PyTorch models from the Jupyter server, TorchServe-compatible."""

    # Its settings, configured as `c.ServeApp.<name>`: `ServeAppTraits` (app_config.py).
    name = "jupyter_serve"
    description = "Serve PyTorch models from the Jupyter server, TorchServe-compatible."

    @classmethod
    def class_own_traits(cls, **metadata: Any) -> dict[str, TraitType[Any, Any]]:
        """ServeApp's own traits include `ServeAppTraits`' (its settings, in app_config.py):
        jupyter_server hands an extension's own traits to the server as the setting
        `jupyter_serve_config` (`ExtensionApp.extension_config`)."""
        own = super().class_own_traits(**metadata)
        if cls is not ServeApp:  # a subclass's own traits are its own
            return own
        return {**ServeAppTraits.class_own_traits(**metadata), **own}

    @default("model_store")
    def _default_model_store(self) -> str:
        root = getattr(self.serverapp, "root_dir", None) or "."
        return str(Path(root) / "model_store")

    @default("workdir")
    def _default_workdir(self) -> str:
        return str(
            server_workdir(Path(jupyter_data_dir()), getattr(self.serverapp, "root_dir", None))
        )

    def initialize_handlers(self) -> None:
        prefix = self.url_prefix.strip("/")
        self.handlers.extend((url_path_join(prefix, pattern), route) for pattern, route in ROUTES)
        serverapp = self.serverapp
        if serverapp is not None:
            quiet_successful_predictions(serverapp.web_app.settings)
        self.fast_token: Callable[[], str] | None = None
        if self.fast_predictions and serverapp is not None:
            self.fast_token = fast_path_token(serverapp)  # the lane's, once it is attached

    def initialize_settings(self) -> None:
        from jupyter_serve.server.keys import KeyStore  # the store of `serve_keys`

        self.apply_ts_config()
        self.startup_task: asyncio.Task[list[tuple[str, str]]] | None = None
        self.metrics = ServeMetrics(
            config=self.metrics_settings(), auto_detect=self.model_metrics_auto_detect
        )
        self.factory = WorkerFactory(enabled=self.fork_workers, withhold=self.worker_env_withheld)
        self.registry = ModelRegistry(self.registry_config())
        self.keys = KeyStore(self.workdir)
        self.settings.update(
            {"serve_registry": self.registry, "serve_metrics": self.metrics, "serve_app": self,
             "serve_keys": self.keys}
        )  # fmt: skip
        self._worker_log_handlers = show_worker_output(self.log)

    def server_defaults(self) -> ServerDefaults:
        return ServerDefaults(
            batch_size=self.batch_size,
            max_batch_delay_ms=self.max_batch_delay,
            response_timeout=self.response_timeout,
            startup_timeout=self.startup_timeout,
            default_workers=self.default_workers_per_model,
            job_queue_size=self.job_queue_size,
            batch_policy=BatchPolicy(self.batch_policy),
            limit_max_image_pixels=self.limit_max_image_pixels,
            decode_input_request=self.decode_input_request,
            service_envelope=self.service_envelope,
            model_metrics=self.metrics_settings().worker_declarations(),
        )

    def registry_config(self) -> RegistryConfig:
        Path(self.model_store).mkdir(parents=True, exist_ok=True)
        return RegistryConfig(
            model_store=Path(self.model_store),
            workdir=Path(self.workdir),
            defaults=self.server_defaults(),
            allowed_urls=tuple(self.allowed_urls),
            max_download_size=self.max_download_size,
            extract_limits=ExtractLimits(
                max_total_bytes=self.max_archive_bytes, max_ratio=self.max_archive_ratio
            ),
            allow_local_paths=self.allow_local_paths,
            workspace_root=Path(getattr(self.serverapp, "root_dir", None) or "."),
            install_py_dep_per_model=self.install_py_dep_per_model,
            env_withheld=tuple(self.worker_env_withheld),
            snapshots=self.snapshots,
            pool_factory=self._make_pool,
            on_drop=self.metrics.forget_model,
        )

    def _make_pool(self, spec: Any, batcher: Any) -> WorkerPool:
        metrics = self.metrics
        return WorkerPool(spec, batcher, on_metrics=metrics.record_batch,
                          on_load=metrics.record_load, factory=self.factory,
                          withhold=self.worker_env_withheld)  # fmt: skip

    def metrics_settings(self) -> MetricsConfig:
        """The `metrics_config` file's metrics (read once), else TorchServe's default file."""
        if not self.metrics_config:
            return DEFAULT_METRICS
        loaded: MetricsConfig | None = getattr(self, "_metrics_settings", None)
        if loaded is None or loaded.source != self.metrics_config:
            try:
                loaded = load_metrics_config(self.metrics_config)
            except BadRequest as exc:
                raise TraitError(f"ServeApp.metrics_config: {exc.message}") from None
            self._metrics_settings = loaded
        return loaded

    def apply_ts_config(self) -> None:
        """Fill traits not set explicitly from `ts_config` (TorchServe's precedence)."""
        self.ts_model_snapshot: dict[str, Any] | None = None
        if not self.ts_config:
            return
        properties = apply_env_overrides(read_properties(self.ts_config), os.environ)
        load_models = properties.pop("load_models", None)  # `all` lists the final model_store
        config = from_properties(properties)
        self.ts_model_snapshot = config.model_snapshot  # restored at start instead of load_models
        explicit = self.config.get("ServeApp", {})
        for key, trait in TS_CONFIG_TRAITS.items():
            value = getattr(config, key)
            if value is not None and trait not in explicit:
                setattr(self, trait, list(value) if isinstance(value, tuple) else value)
        if load_models is not None and "load_models" not in explicit:
            self.load_models = [part.strip() for part in load_models.split(",") if part.strip()]

    def startup_plan(self) -> StartupPlan:
        return StartupPlan(
            model_store=Path(self.model_store),
            load_models=tuple(self.load_models),
            models=self.models,
            default_workers=self.default_workers_per_model,
            restore=self.snapshots and not self.ts_config,
            snapshot=getattr(self, "ts_model_snapshot", None),
        )

    async def start_models(self) -> list[tuple[str, str]]:
        """Restore the snapshot and register `load_models`; returns (name, version) started."""
        started = await start_models(self.registry, self.startup_plan())
        names = ", ".join(f"{name} {version}" for name, version in started) or "none"
        self.log.info("jupyter_serve: startup models serving: %s", names)
        return started

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Bring the startup models up in the background: the server answers at once."""
        self.startup_task = asyncio.ensure_future(self._start_models_logged())
        http_server = getattr(serverapp, "http_server", None)
        if http_server is not None:
            self.attach_lane(http_server)

    def attach_lane(self, http_server: Any) -> Lane | None:
        """Let the serve lane read `http_server`'s new connections first (`server/http/lane.py`).

        Only with `fast_predictions` on and an auth the lane can repeat
        (`admission.fast_path_token`); returns the lane, or None.
        """
        serverapp = self.serverapp
        token = getattr(self, "fast_token", None)
        if serverapp is None or token is None:
            return None
        prefix = url_path_join(serverapp.base_url, self.url_prefix.strip("/")) + "/"
        self.lane = Lane(
            http_server,
            prefix,
            dict(fast_targets(serverapp.web_app.settings)),
            token=token,
            max_body=lambda: int(self.max_request_size),
            settings=serverapp.web_app.settings,
        )
        self.lane.attach()
        return self.lane

    async def _start_models_logged(self) -> list[tuple[str, str]]:
        try:
            return await self.start_models()
        except Exception:
            self.log.exception("jupyter_serve: starting the startup models failed")
            return []

    async def stop_extension(self) -> None:
        """Stop every worker of every model, and the worker factory."""
        lane: Lane | None = getattr(self, "lane", None)
        if lane is not None:
            lane.detach()
        startup = getattr(self, "startup_task", None)
        if startup is not None and not startup.done():
            startup.cancel()
            await asyncio.gather(startup, return_exceptions=True)
        registry: ModelRegistry | None = getattr(self, "registry", None)
        factory: WorkerFactory | None = getattr(self, "factory", None)
        if registry is not None:
            await asyncio.shield(registry.shutdown())
        if factory is not None:  # after the workers, so it reaps every one it forked
            await asyncio.shield(factory.stop())
        hide_worker_output(getattr(self, "_worker_log_handlers", []))
