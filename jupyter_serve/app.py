"""`ServeApp`: the jupyter_server extension that serves models under `{base_url}serve/`.

The server process never runs model code: it owns the routes, the model
registry (one batcher and worker pool per model version) and the metrics.
Routes reach them through tornado settings:

* ``serve_registry``: the `ModelRegistry`;
* ``serve_metrics``: the `ServeMetrics`;
* ``serve_app``: this `ServeApp` (limits such as `max_request_size`).

`stop_extension` stops every worker, so nothing outlives the server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import url_path_join
from traitlets import Bool, Float, Int, List, Unicode, default

from .metrics import ServeMetrics
from .models import BatchPolicy, ServerDefaults
from .pool import WorkerPool
from .registry import ModelRegistry, RegistryConfig
from .routes import ROUTES


class ServeApp(ExtensionApp):
    """Serve PyTorch models from the Jupyter server, TorchServe-compatible."""

    name = "jupyter_serve"
    description = "Serve PyTorch models from the Jupyter server, TorchServe-compatible."

    url_prefix = Unicode(
        "serve", config=True, help="Path under the server's base_url for every route."
    )
    model_store = Unicode(
        config=True,
        help="Folder holding model archives (.mar) that `url=name.mar` refers to. "
        "Default: `model_store` under the server's root directory.",
    )
    workdir = Unicode(
        config=True,
        help="Folder for extracted archives, per-model dependencies and the model snapshot. "
        "Default: `jupyter_serve` in the Jupyter data directory.",
    )
    load_models = List(
        Unicode(),
        config=True,
        help="Models to register at start, in TorchServe's syntax: `name=x.mar`, `x.mar`, "
        "or `all` (every archive in the model store).",
    )
    default_workers_per_model = Int(
        0,
        config=True,
        help="Workers a model gets when neither the register call (initial_workers) nor its "
        "model-config.yaml says (TorchServe's default_workers_per_model; 0 = none).",
    )
    batch_size = Int(1, config=True, help="Default batch size of a model (batchSize).")
    max_batch_delay = Float(
        100.0, config=True, help="Default maxBatchDelay of a model, in milliseconds."
    )
    batch_policy = Unicode(
        "eager",
        config=True,
        help="How batches form: `eager` sends a lone request at once and lets batches grow "
        "while workers are busy; `strict` waits up to maxBatchDelay as TorchServe does.",
    )
    response_timeout = Float(
        120.0, config=True, help="Default responseTimeout of a model, in seconds."
    )
    startup_timeout = Float(120.0, config=True, help="Default startupTimeout, in seconds.")
    max_request_size = Int(
        6553500, config=True, help="Largest request body in bytes; larger gets 413."
    )
    job_queue_size = Int(100, config=True, help="Requests queued per model before 503.")
    allowed_urls = List(
        Unicode(),
        config=True,
        help="Regexes an http(s) register url must match to be downloaded. Default: none "
        "(only files in the model store or local paths can be registered).",
    )
    install_py_dep_per_model = Bool(
        False,
        config=True,
        help="Install an archive's requirements.txt (into a per-model folder, never the "
        "server's environment) before its workers start.",
    )
    snapshots = Bool(
        True,
        config=True,
        help="Write every change to the set of models to a snapshot and restore it at start.",
    )
    enable_model_api = Bool(
        True,
        config=True,
        help="Allow register (POST /models) and unregister (DELETE /models/...). Off, they "
        "answer 405 as in TorchServe's default.",
    )

    @default("model_store")
    def _default_model_store(self) -> str:
        root = getattr(self.serverapp, "root_dir", None) or "."
        return str(Path(root) / "model_store")

    @default("workdir")
    def _default_workdir(self) -> str:
        return str(Path(jupyter_data_dir()) / "jupyter_serve")

    def initialize_handlers(self) -> None:
        prefix = self.url_prefix.strip("/")
        self.handlers.extend((url_path_join(prefix, pattern), route) for pattern, route in ROUTES)

    def initialize_settings(self) -> None:
        self.metrics = ServeMetrics()
        self.registry = ModelRegistry(self.registry_config())
        self.settings.update(
            {"serve_registry": self.registry, "serve_metrics": self.metrics, "serve_app": self}
        )

    def server_defaults(self) -> ServerDefaults:
        return ServerDefaults(
            batch_size=self.batch_size,
            max_batch_delay_ms=self.max_batch_delay,
            response_timeout=self.response_timeout,
            startup_timeout=self.startup_timeout,
            default_workers=self.default_workers_per_model,
            job_queue_size=self.job_queue_size,
            batch_policy=BatchPolicy(self.batch_policy),
        )

    def registry_config(self) -> RegistryConfig:
        Path(self.model_store).mkdir(parents=True, exist_ok=True)
        return RegistryConfig(
            model_store=Path(self.model_store),
            workdir=Path(self.workdir),
            defaults=self.server_defaults(),
            allowed_urls=tuple(self.allowed_urls),
            install_py_dep_per_model=self.install_py_dep_per_model,
            snapshots=self.snapshots,
            pool_factory=self._make_pool,
        )

    def _make_pool(self, spec: Any, batcher: Any) -> WorkerPool:
        return WorkerPool(spec, batcher, on_metrics=self.metrics.record_batch)

    async def stop_extension(self) -> None:
        """Stop every worker of every model."""
        registry: ModelRegistry | None = getattr(self, "registry", None)
        if registry is not None:
            await asyncio.shield(registry.shutdown())
