"""`ModelSpec`: everything the server knows about one registered model version, and how it is built.

A `ModelSpec` is frozen and validated on construction (every bad value is a
`BadRequest` saying what to change). Durations are SECONDS; TorchServe's
milliseconds (REST `max_batch_delay`, yaml `maxBatchDelay`) are converted once,
by `resolve_spec`, which merges with TorchServe's precedence::

    ServerDefaults (config.properties)  <  model-config.yaml  <  REST parameters

Workers: REST `initial_workers`, when given, sets min = max = initial_workers.
Otherwise the yaml's `minWorkers`/`maxWorkers` apply (one given alone stands for
both), and otherwise `ServerDefaults.default_workers` (0, TorchServe's REST
default). TorchServe 0.12 itself lets a valid yaml pair win over
`initial_workers`; jupyter_serve keeps the documented precedence instead.

Devices: a model runs on GPUs when the server may use some (`gpus`, default
`devices.gpu_count()`) and neither the yaml nor the server forces `cpu`; a yaml
asking for `gpu` on a machine without GPUs runs on CPU (with a warning).

Metrics: `model_metrics` are the `model_metrics` declarations (worker form, see
`metrics_config`) of the metrics_config the yaml's `jupyter_serve: metricsConfig:`
names (a file in the model folder), else the server's (`ServerDefaults`).

Python: workers run `ServerDefaults.python`, or the interpreter of the kernelspec
named by the yaml's `jupyter_serve: kernel:`. Per-model requirements are the
caller's step (`deps.install_requirements`, then `spec.with_changes(python_path=...)`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from jupyter_serve.archive.manifest import (
    MAX_NAME_LENGTH,
    RUNTIMES,
    check_model_name,
    read_manifest,
)
from jupyter_serve.server import devices
from jupyter_serve.server.model_config import ModelConfig, load_model_config
from jupyter_serve.wire.errors import BadRequest

log = logging.getLogger(__name__)


class BatchPolicy(str, Enum):
    """How a batch forms: EAGER takes what is queued now; STRICT waits max_batch_delay (TS)."""

    EAGER = "eager"
    STRICT = "strict"


class DeviceType(str, Enum):
    CPU = "cpu"
    GPU = "gpu"


@dataclass(frozen=True)
class ModelSpec:
    """One model version as registered: identity, files, batching, workers, devices, Python."""

    model_name: str
    version: str  # "1.0" default
    model_dir: str  # extracted archive folder (holds MAR-INF/MANIFEST.json)
    handler: str  # effective handler string (register override applied)
    manifest: dict[str, Any]  # the manifest as a dict
    model_url: str = ""  # what the user registered (x.mar), for describe and snapshots
    batch_size: int = 1
    max_batch_delay: float = 0.1  # seconds
    response_timeout: float = 120.0  # seconds
    startup_timeout: float = 120.0  # seconds; 0 is allowed (the pool fails the load)
    min_workers: int = 1
    max_workers: int = 1
    job_queue_size: int = 100
    device_type: DeviceType = DeviceType.CPU
    device_ids: tuple[int, ...] = ()  # GPUs to round-robin over (empty = all visible)
    batch_policy: BatchPolicy = BatchPolicy.EAGER
    python: str = sys.executable  # interpreter for workers
    python_path: tuple[str, ...] = ()  # extra sys.path entries for workers (deps folder)
    torch_threads: int | None = None
    model_yaml_config: dict[str, Any] = field(default_factory=dict)
    limit_max_image_pixels: bool = True
    decode_input_request: bool = True
    envelope: str = ""  # the worker wraps the handler in ts.torch_handler.request_envelope.<it>
    runtime: str = "python"
    max_retry_timeout: float = 300.0  # maxRetryTimeoutInSec
    client_timeout_ms: int = 0  # clientTimeoutInMills; 0 = none
    continuous_batching: bool = False  # continuousBatching (server/pool/continuous.py)
    sequence_batching: bool = False  # sequenceBatching: TorchServe's stateful sequences
    sequence_max_idle_ms: int = 0  # sequenceMaxIdleMSec: a sequence idle this long ends
    sequence_timeout_ms: int = 0  # sequenceTimeoutMSec: a sequence's lifetime; 0 = none
    max_sequence_job_queue_size: int = 1  # maxSequenceJobQueueSize: queued per sequence
    max_num_sequence: int = 1  # maxNumSequence: sequences open at once
    model_metrics: tuple[dict[str, Any], ...] = ()  # metrics_config's, for the workers

    def __post_init__(self) -> None:
        self._normalize()
        check_model_name(self.model_name)
        _check_identity(self)
        _check_batching(self)
        _check_workers(self)
        _check_runtime(self)

    def _normalize(self) -> None:
        """Accept enum values as strings and sequences as tuples (frozen: set via object)."""
        values = {
            "device_type": _enum(DeviceType, self.device_type, "device_type"),
            "batch_policy": _enum(BatchPolicy, self.batch_policy, "batch_policy"),
            "device_ids": tuple(self.device_ids),
            "python_path": tuple(str(entry) for entry in self.python_path),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def key(self) -> tuple[str, str]:
        """`(model_name, version)`: how the registry finds this spec."""
        return (self.model_name, self.version)

    def with_changes(self, **changes: Any) -> ModelSpec:
        """A copy with `changes` applied, validated again."""
        return dataclasses.replace(self, **changes)


def _enum(kind: type[Enum], value: Any, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = " or ".join(str(member.value) for member in kind)
        raise BadRequest(f"{name} must be {allowed}, got {value!r}.") from None


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise BadRequest(message)


def _is_int(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _is_seconds(value: Any, *, positive: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return value > 0 if positive else value >= 0


def _check_identity(spec: ModelSpec) -> None:
    from jupyter_serve.server.registry.names import (
        unshown_character,  # the registry imports this module
    )

    _require(
        isinstance(spec.version, str) and bool(spec.version) and "/" not in spec.version,
        f"Model version must be a non-empty string without '/', got {spec.version!r}.",
    )
    unshown = unshown_character(spec.version)
    _require(unshown is None, f"Model version {spec.version!r} is refused: {unshown}.")
    _require(
        len(spec.version) <= MAX_NAME_LENGTH,
        f"Model version is too long: {len(spec.version)} characters (at most {MAX_NAME_LENGTH}).",
    )
    _require(bool(spec.model_dir), "model_dir must name the model's folder.")
    _require(
        isinstance(spec.handler, str) and bool(spec.handler.strip()),
        f'Model "{spec.model_name}" has no handler: set "handler" in MAR-INF/MANIFEST.json '
        "or register with handler=module:function.",
    )


def _check_batching(spec: ModelSpec) -> None:
    _require(_is_int(spec.batch_size, 1), f"batch_size must be >= 1, got {spec.batch_size!r}.")
    _require(
        _is_seconds(spec.max_batch_delay),
        f"max_batch_delay must be >= 0 seconds, got {spec.max_batch_delay!r}.",
    )
    _require(
        _is_seconds(spec.response_timeout, positive=True),
        f"response_timeout must be > 0 seconds, got {spec.response_timeout!r}.",
    )
    _require(
        _is_seconds(spec.startup_timeout),
        f"startup_timeout must be >= 0 seconds, got {spec.startup_timeout!r}.",
    )
    _require(
        _is_int(spec.job_queue_size, 1),
        f"job_queue_size must be >= 1, got {spec.job_queue_size!r}.",
    )
    _require(
        _is_seconds(spec.max_retry_timeout),
        f"max_retry_timeout must be >= 0 seconds, got {spec.max_retry_timeout!r}.",
    )
    _require(
        _is_int(spec.client_timeout_ms, 0),
        f"client_timeout_ms must be an integer >= 0, got {spec.client_timeout_ms!r}.",
    )
    _check_sequences(spec)


def _check_sequences(spec: ModelSpec) -> None:
    for name in ("sequence_max_idle_ms", "sequence_timeout_ms"):
        value = getattr(spec, name)
        _require(_is_int(value, 0), f"{name} must be an integer >= 0, got {value!r}.")
    for name in ("max_sequence_job_queue_size", "max_num_sequence"):
        value = getattr(spec, name)
        _require(_is_int(value, 1), f"{name} must be an integer >= 1, got {value!r}.")
    _require(
        not spec.sequence_batching or spec.sequence_max_idle_ms > 0,
        "sequenceBatching needs sequenceMaxIdleMSec > 0: it is how long a sequence may wait "
        "for its next request (TorchServe fails every request of such a model).",
    )


def _check_workers(spec: ModelSpec) -> None:
    _require(
        _is_int(spec.min_workers, 0) and _is_int(spec.max_workers, 0),
        f"Worker counts must be integers >= 0, got min_worker={spec.min_workers!r}, "
        f"max_worker={spec.max_workers!r}.",
    )
    _require(spec.max_workers >= spec.min_workers, "max_worker cannot be less than min_worker.")
    _require(
        spec.torch_threads is None or _is_int(spec.torch_threads, 1),
        f"torch_threads must be >= 1 (or unset), got {spec.torch_threads!r}.",
    )
    _require(
        all(_is_int(gpu, 0) for gpu in spec.device_ids),
        f"device_ids must be GPU ids >= 0, got {spec.device_ids!r}.",
    )


def _check_runtime(spec: ModelSpec) -> None:
    _require(spec.runtime in RUNTIMES, f"Invalid RuntimeType value: {spec.runtime}")
    _require(bool(spec.python), "python must name the workers' interpreter.")


@dataclass(frozen=True)
class ServerDefaults:
    """The server-wide settings a model starts from (TorchServe's config.properties)."""

    batch_size: int = 1
    max_batch_delay_ms: float = 100
    response_timeout: float = 120
    startup_timeout: float = 120
    default_workers: int = 0  # workers when neither REST nor yaml says (TorchServe: 0)
    job_queue_size: int = 100
    limit_max_image_pixels: bool = True
    decode_input_request: bool = True
    service_envelope: str = ""  # config.properties' service_envelope: body, json, kserve, ...
    batch_policy: BatchPolicy = BatchPolicy.EAGER
    python: str = sys.executable
    max_retry_timeout: float = 300
    torch_threads: int | None = None
    device_type: DeviceType | None = None  # None: GPU when available; a yaml deviceType wins
    model_metrics: tuple[dict[str, Any], ...] = ()  # the metrics_config's model_metrics


@dataclass(frozen=True)
class RegisterParams:
    """REST register parameters, already typed; None means "not given"."""

    model_name: str | None = None
    handler: str | None = None
    runtime: str | None = None
    batch_size: int | None = None
    max_batch_delay_ms: float | None = None
    initial_workers: int | None = None
    response_timeout: float | None = None
    startup_timeout: float | None = None


def resolve_spec(
    model_dir: str | Path,
    *,
    params: RegisterParams | None = None,
    defaults: ServerDefaults | None = None,
    model_url: str = "",
    gpus: int | None = None,
) -> ModelSpec:
    """The spec of the model in `model_dir` (extracted), merging defaults < the handler's
    (HANDLER_DEFAULTS) < yaml < REST."""
    folder = Path(model_dir)
    params = params or RegisterParams()
    defaults = defaults or ServerDefaults()
    manifest = read_manifest(folder)
    config = load_model_config(folder, manifest)
    handler = params.handler or manifest.model.handler or ""
    values = _default_values(defaults)
    values.update(HANDLER_DEFAULTS.get(handler, {}))
    values.update(config.settings)
    values.update(_rest_values(params))
    values.update(_workers(defaults.default_workers, config.settings, params.initial_workers))
    values.update(_device(values, defaults.device_type, gpus, config))
    return ModelSpec(
        model_name=params.model_name or manifest.model.model_name or folder.name,
        version=manifest.model.model_version or "1.0",
        model_dir=str(folder),
        handler=handler,
        manifest=manifest.to_dict(),
        model_url=model_url,
        runtime=params.runtime or manifest.runtime,
        python=_python(config, defaults),
        model_yaml_config=config.data,
        model_metrics=_model_metrics(folder, config, defaults),
        **values,
    )


HANDLER_DEFAULTS: dict[str, dict[str, Any]] = {
    # Language models are served token by token (jupyter_serve/handlers/causal_lm.py).
    # 32 sequences at once: a decode step batches them all (jupyter_serve/handlers/lm_batch.py)
    "causal_lm": {"continuous_batching": True, "batch_size": 32},
}
"""Settings a built-in handler changes from the server's defaults (the yaml and the
registration still win)."""


def _default_values(defaults: ServerDefaults) -> dict[str, Any]:
    return {
        "batch_size": defaults.batch_size,
        "max_batch_delay": defaults.max_batch_delay_ms / 1000,
        "response_timeout": defaults.response_timeout,
        "startup_timeout": defaults.startup_timeout,
        "job_queue_size": defaults.job_queue_size,
        "limit_max_image_pixels": defaults.limit_max_image_pixels,
        "decode_input_request": defaults.decode_input_request,
        "envelope": defaults.service_envelope,
        "batch_policy": defaults.batch_policy,
        "max_retry_timeout": defaults.max_retry_timeout,
        "torch_threads": defaults.torch_threads,
    }


def _rest_values(params: RegisterParams) -> dict[str, Any]:
    delay = params.max_batch_delay_ms
    given = {
        "batch_size": params.batch_size,
        "max_batch_delay": None if delay is None else delay / 1000,
        "response_timeout": params.response_timeout,
        "startup_timeout": params.startup_timeout,
    }
    return {name: value for name, value in given.items() if value is not None}


def _workers(default: int, yaml_settings: dict[str, Any], initial: int | None) -> dict[str, int]:
    if initial is not None:
        low = high = initial
    else:
        low = yaml_settings.get("min_workers", yaml_settings.get("max_workers", default))
        high = yaml_settings.get("max_workers", yaml_settings.get("min_workers", default))
    return {"min_workers": low, "max_workers": high}


def _device(
    values: dict[str, Any], forced: DeviceType | None, gpus: int | None, config: ModelConfig
) -> dict[str, Any]:
    """device_type and device_ids: GPU only when GPUs are usable and nothing forces CPU."""
    requested = values.get("device_type") or forced
    wanted = None if requested is None else DeviceType(requested)
    available = devices.gpu_count() if gpus is None else gpus
    if wanted is DeviceType.CPU or available <= 0:
        if wanted is DeviceType.GPU:
            log.warning("%s asks for deviceType gpu, but no GPU is usable: using CPU", config.path)
        return {"device_type": DeviceType.CPU, "device_ids": ()}
    ids = tuple(values.get("device_ids", ()))
    unknown = [gpu for gpu in ids if gpu >= available]
    if unknown:
        raise BadRequest(
            f"{config.path}: deviceIds {unknown} name GPUs this server cannot use "
            f"(it may use {available}: ids 0..{available - 1})."
        )
    return {"device_type": DeviceType.GPU, "device_ids": ids}


def _model_metrics(
    folder: Path, config: ModelConfig, defaults: ServerDefaults
) -> tuple[dict[str, Any], ...]:
    """The model's own metrics_config's `model_metrics`, else the server's."""
    if config.metrics_config is None:
        return defaults.model_metrics
    from jupyter_serve.server.metrics.config import load_metrics_config

    path = folder / config.metrics_config
    if not os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep):
        raise BadRequest(f"{config.path}: metricsConfig must name a file in the model folder.")
    return load_metrics_config(path).worker_declarations()


def _python(config: ModelConfig, defaults: ServerDefaults) -> str:
    if config.kernel is None:
        return defaults.python
    from jupyter_serve.server.kernels import python_for_kernel

    return python_for_kernel(config.kernel)
