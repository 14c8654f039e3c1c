"""`ServeAppTraits`: every setting of `ServeApp`, with its help text and its default.

Each trait here is set as `c.ServeApp.<name>` in a Jupyter config file or
`--ServeApp.<name>=...` on the command line: `ServeApp` (app.py) inherits them,
and this mixin is a plain `HasTraits`, not a `Configurable`, so `ServeApp` stays
the only config section and the one `--help-all` lists them under.

What does NOT live here: the defaults that depend on the Jupyter server
(`model_store`, `workdir`: its root directory) and everything the server does
with these values (routes, registry, startup models, config.properties filling
them) live in app.py.
"""

from __future__ import annotations

import os

from traitlets import Bool, Dict, Float, HasTraits, Int, List, Unicode, default

from jupyter_serve.archive import ExtractLimits
from jupyter_serve.server.registry.sources import MAX_DOWNLOAD_SIZE
from jupyter_serve.wire.errors import DEFAULT_MAX_REQUEST_SIZE
from jupyter_serve.wire.oip import DEFAULT_MAX_TENSOR_ELEMENTS


class ServeAppTraits(HasTraits):
    """The configurable settings of `ServeApp` (see the module docstring)."""

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
        help="Folder for extracted archives, per-model dependencies, the model snapshot and "
        "the inference keys. Default: `jupyter_serve/servers/<root name>-<hash of the root "
        "directory>` in the Jupyter data directory, so each Jupyter server (each root "
        "directory) keeps its own models and snapshot.",
    )
    load_models = List(
        Unicode(),
        config=True,
        help="Models to register at start, in TorchServe's syntax: `name=x.mar`, `x.mar`, "
        "or `all` (every archive in the model store). Each gets its model-config.yaml's "
        "workers, else `models`' minWorkers, else max(1, default_workers_per_model).",
    )
    models = Dict(
        config=True,
        help="Per-model settings of startup models, TorchServe's `models` JSON: "
        '{"name": {"1.0": {"batchSize": 4, "maxBatchDelay": 50, "minWorkers": 1, ...}}}.',
    )
    default_workers_per_model = Int(
        0,
        config=True,
        help="Workers a model gets when neither the register call (initial_workers) nor its "
        "model-config.yaml says (TorchServe's default_workers_per_model; 0 = none). "
        "Startup models get at least 1 (TorchServe: one per CPU).",
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
        DEFAULT_MAX_REQUEST_SIZE,
        config=True,
        help="Largest request body in bytes; larger gets 413.",
    )
    job_queue_size = Int(100, config=True, help="Requests queued per model before 503.")
    max_tensor_elements = Int(
        DEFAULT_MAX_TENSOR_ELEMENTS,
        min=1,
        config=True,
        help="Most tensor elements one KServe v2 request may carry over all its inputs, each "
        "list its shapes nest them in counting as one more; more answers 413 before any is "
        "decoded. The default, 4194304, takes any FP32 image batch a default max_request_size "
        "body holds (NCHW or NHWC) and stops 1-byte datatypes at 4M elements.",
    )
    allowed_urls = List(
        Unicode(),
        config=True,
        help="Regexes an http(s) register url must match to be downloaded. Default: none "
        "(only archives and folders in the model store can be registered). Every redirect "
        "must match too, and a url whose decoded path has a `..` segment never does.",
    )
    max_archive_bytes = Int(
        ExtractLimits.max_total_bytes,
        min=1,
        config=True,
        help="Most bytes one archive may expand to when it is registered (never more than the "
        "free disk space either). Default 64 GiB.",
    )
    max_archive_ratio = Float(
        ExtractLimits.max_ratio,
        min=0,
        config=True,
        help="Most times an archive may expand its own size once past 16 MiB (zip bombs "
        "expand thousands of times; weights about 1x, code and vocabularies 3-10x). 0 turns "
        "the check off. Default 200.",
    )
    max_download_size = Int(
        MAX_DOWNLOAD_SIZE,
        min=0,
        config=True,
        help="Largest archive an `allowed_urls` download may bring, in bytes, counted as it "
        "streams (0: no limit). The default, 4 GiB, holds the .mar archives TorchServe models "
        "ship (ResNets, BERTs, fp16 models of up to two billion parameters) while one wrong "
        "or hostile url cannot fill a notebook server's disk; raise it for bigger models.",
    )
    allow_local_paths = Bool(
        False,
        config=True,
        help="Let register urls name archives and folders anywhere on the server's disk, by "
        "absolute path or file:// url, as TorchServe does. Off (the default), urls name "
        "entries of the model store, or archives in the `jupyter_serve_work` folders (where "
        "`%%handler --serve` builds them) under the server's root; turn it on only if "
        "everyone who may register models may read and run any file the server can.",
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
    limit_max_image_pixels = Bool(
        True, config=True, help="Let PIL refuse decompression-bomb images (TorchServe's key)."
    )
    decode_input_request = Bool(
        True,
        config=True,
        help="Decode request bodies for handlers (JSON, text); off, handlers get raw bytes.",
    )
    ts_config = Unicode(
        "",
        config=True,
        help="A TorchServe config.properties whose single-server keys fill every trait not "
        "set explicitly (model_store, load_models, models, default_workers_per_model, ...). "
        "As `torchserve --ts-config`, giving one skips restoring the snapshot.",
    )
    service_envelope = Unicode(
        "",
        config=True,
        help="As TorchServe's service_envelope: every model's worker wraps its handler in "
        "ts.torch_handler.request_envelope.<name> (body, json, kserve, kservev2), for all "
        "inference routes; the KServe routes then pass bodies to the worker as TorchServe "
        "does. Empty: no envelope (the KServe routes unwrap v1/v2 envelopes themselves).",
    )
    fast_predictions = Bool(
        True,
        config=True,
        help="Serve token-authenticated predictions and explanations (an `Authorization: "
        "token T` or `Bearer T` header) on the serve lane, which skips jupyter_server's "
        "per-request machinery: the same decision, the same answers, a fraction of the server "
        "CPU. Only with jupyter_server's stock identity provider and authorizer, or "
        "JupyterHub's identity provider (whose decisions it repeats).",
    )
    fork_workers = Bool(
        True,
        config=True,
        help="Fork new workers (register, scale-up, restart) from one worker factory that has "
        "imported torch, instead of starting a fresh interpreter each: a worker starts in "
        "milliseconds and shares torch's memory. Started on first need; Linux only. Workers of "
        "another Python (a kernelspec's) or whose model's dependencies replace a package the "
        "factory imported start fresh, as do all workers while the factory restarts.",
    )
    worker_env_withheld = List(
        Unicode(),
        config=True,
        help="More environment variables kept from workers and the worker factory: names or "
        "glob patterns (`MY_*`), matched case-insensitively. Workers always get the server's "
        "environment without Jupyter's and JupyterHub's credentials: every variable whose "
        "name starts with JUPYTER (JUPYTERHUB_ too) or JPY_ and contains TOKEN, SECRET, "
        "PASSWORD, PASSWD, PWD, KEY, CRYPT or COOKIE (JUPYTER_TOKEN, JUPYTERHUB_API_TOKEN, "
        "JPY_API_TOKEN, JUPYTER_SERVE_TOKEN, ...). Default: none more.",
    )
    spare_workers = Int(
        0, min=0, config=True, help="Deprecated, no effect: the worker factory replaced spares."
    )
    max_workers_per_model = Int(
        config=True,
        help="The most workers one model version may have: a register (initial_workers) or "
        "scale (min_worker, max_worker) asking for more answers 400 instead of starting that "
        "many processes. Default: twice the machine's CPU count, at least 8.",
    )
    metrics_config = Unicode(
        "",
        config=True,
        help="A TorchServe metrics YAML (its ts_metrics and model_metrics sections): which "
        "metrics /metrics has, with their type, unit and labels, and the metrics every "
        "model's context.metrics declares. Empty: TorchServe's default file. A model's "
        "model-config.yaml may name its own (jupyter_serve: metricsConfig: FILE).",
    )
    model_metrics_auto_detect = Bool(
        True,
        config=True,
        help="Add a handler metric the metrics_config does not declare to /metrics (with its "
        "own dimensions and Hostname). TorchServe's default is false: such metrics are dropped.",
    )
    enable_model_api = Bool(
        True,
        config=True,
        help="Allow register (POST /models) and unregister (DELETE /models/...). Off, they "
        "answer 405 as in TorchServe's default.",
    )

    @default("max_workers_per_model")
    def _default_max_workers_per_model(self) -> int:
        return max(8, 2 * (os.cpu_count() or 1))
