"""`model-config.yaml`: find it in a model folder, load it safely, map its keys to ModelSpec fields.

The file is the manifest's `configFile` (torch-model-archiver `-c`), or else a
`model-config.yaml` beside `MAR-INF/`. It is read with `yaml.safe_load` within
limits: 1 MiB, 100,000 values (aliases count each time they are used, so alias
bombs are refused) and 64 levels of nesting (so are self-referencing aliases).
It is kept whole, as JSON-safe data (dates become ISO strings, mapping keys
strings), for `context.model_yaml_config`.

Keys read by the server, TorchServe 0.12's, with the ModelSpec field::

    minWorkers, maxWorkers     min_workers, max_workers   integers >= 0
    batchSize, jobQueueSize    batch_size, job_queue_size integers >= 1
    maxBatchDelay              max_batch_delay            MILLISECONDS here, seconds in the spec
    responseTimeout            response_timeout           seconds > 0
    startupTimeout             startup_timeout            seconds >= 0
    maxRetryTimeoutInSec       max_retry_timeout          seconds >= 0
    clientTimeoutInMills       client_timeout_ms          integer ms >= 0 (0 = none)
    continuousBatching         continuous_batching        true | false
    sequenceBatching           sequence_batching          true | false
    sequenceMaxIdleMSec        sequence_max_idle_ms       integer ms >= 0
    sequenceTimeoutMSec        sequence_timeout_ms        integer ms >= 0 (0 = none)
    maxSequenceJobQueueSize    max_sequence_job_queue_size integer >= 1
    maxNumSequence             max_num_sequence           integer >= 1
    deviceType                 device_type                cpu | gpu (neuron is refused)
    deviceIds                  device_ids                 list of GPU ids

and jupyter_serve's own, under a `jupyter_serve:` section::

    batchPolicy                batch_policy               eager | strict
    torchThreads               torch_threads              integer >= 1
    kernel                     (ModelConfig.kernel)       a kernelspec name: workers use its Python
    metricsConfig              (ModelConfig.metrics_config) a metrics_config YAML in the model
                                                          folder: this model's model_metrics

A key set to null counts as absent. Other keys (`handler:`, `pt2:`, `system:`
with `extraFiles`/`maxGPUMemory`, TorchServe keys jupyter_serve does not use)
are left to the handler. A wrong type or range is a `BadRequest` naming the file
and key; unlike TorchServe, which logs and ignores bad values, nothing is ignored.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jupyter_serve.archive.manifest import Manifest, read_manifest
from jupyter_serve.wire.errors import BadRequest

CONFIG_NAME = "model-config.yaml"
SECTION = "jupyter_serve"
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_VALUES = 100_000
MAX_CONFIG_DEPTH = 64

Converter = Callable[[Any, str], Any]


@dataclass(frozen=True)
class ModelConfig:
    """A loaded model-config.yaml: the whole file and the settings the server reads from it."""

    path: Path | None = None
    data: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # ModelSpec field -> value
    kernel: str | None = None
    metrics_config: str | None = None  # relative to the model folder


def load_model_config(model_dir: str | Path, manifest: Manifest | None = None) -> ModelConfig:
    """The model's yaml config, or an empty one when the model has none."""
    folder = Path(model_dir)
    path = find_config(folder, manifest or read_manifest(folder))
    if path is None:
        return ModelConfig()
    data = load_yaml_file(path)
    settings = _settings(data, _FRONTEND_KEYS, str(path))
    settings.update(_settings(_section(data, path), _SECTION_KEYS, f"{path}: {SECTION}"))
    kernel = settings.pop("kernel", None)
    metrics = settings.pop("metrics_config", None)
    return ModelConfig(path, data, settings, kernel=kernel, metrics_config=metrics)


def find_config(model_dir: Path, manifest: Manifest) -> Path | None:
    """The manifest's `configFile` (which must exist inside the folder), else model-config.yaml."""
    name = manifest.model.config_file
    if not name:
        default = model_dir / CONFIG_NAME
        return default if default.is_file() else None
    path = (model_dir / name).resolve()
    if not path.is_relative_to(model_dir.resolve()) or not path.is_file():
        raise BadRequest(
            f'The manifest names the config file "{name}", which is not a file in {model_dir}.'
        )
    return path


def load_yaml_file(path: Path) -> dict[str, Any]:
    """A YAML mapping read within the limits above (also for metrics_config files)."""
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise BadRequest(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; keep model configs small.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data = json_safe({} if data is None else data, str(path))
    except yaml.YAMLError as exc:
        raise BadRequest(f"{path}: invalid YAML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise BadRequest(f"{path}: not UTF-8 text: {exc}") from exc
    except RecursionError:
        raise BadRequest(f"{path}: nested too deeply.") from None
    if not isinstance(data, dict):
        raise BadRequest(f"{path}: expected a mapping of settings, got a {type(data).__name__}.")
    return data


def json_safe(data: Any, where: str, max_values: int = MAX_CONFIG_VALUES) -> Any:
    """A copy of yaml data that JSON can carry to the worker, within `max_values` values."""
    count = 0

    def convert(value: Any, at: str, depth: int) -> Any:
        nonlocal count
        count += 1
        if count > max_values:
            raise BadRequest(
                f"{where}: more than {max_values} values (counting each alias use); "
                "aliases that multiply are refused."
            )
        if depth > MAX_CONFIG_DEPTH:
            raise BadRequest(
                f"{where}: nested more than {MAX_CONFIG_DEPTH} levels deep "
                f"(at {at}; an alias that refers to itself does this)."
            )
        if isinstance(value, dict):
            return {
                str(k): convert(v, f"{at}.{k}" if at else str(k), depth + 1)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [convert(item, f"{at}[{i}]", depth + 1) for i, item in enumerate(value)]
        if isinstance(value, (datetime.date, datetime.datetime)):
            return value.isoformat()
        if value is None or isinstance(value, (str, int, float, bool)):
            return value
        raise BadRequest(
            f"{where}: {at or 'the document'} holds a {type(value).__name__}; "
            "use plain YAML values (no !!binary or !!set)."
        )

    return convert(data, "", 0)


def _section(data: dict[str, Any], path: Path) -> dict[str, Any]:
    section = data.get(SECTION)
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise BadRequest(f"{path}: {SECTION} must be a mapping, got {section!r}.")
    return section


def _settings(
    data: dict[str, Any], keys: dict[str, tuple[str, Converter]], where: str
) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for key, (name, convert) in keys.items():
        if data.get(key) is not None:
            settings[name] = convert(data[key], f"{where}: {key}")
    return settings


def _integer(minimum: int) -> Converter:
    def convert(value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise BadRequest(f"{where} must be an integer >= {minimum}, got {value!r}.")
        return value

    return convert


def _number(*, positive: bool, scale: float = 1.0) -> Converter:
    def convert(value: Any, where: str) -> float:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0 or (positive and value == 0):
            bound = "> 0" if positive else ">= 0"
            raise BadRequest(f"{where} must be a number {bound}, got {value!r}.")
        return float(value) * scale

    return convert


def _choice(*choices: str, refused: str = "") -> Converter:
    def convert(value: Any, where: str) -> str:
        text = value.lower() if isinstance(value, str) else value
        if text not in choices:
            allowed = " or ".join(choices)
            raise BadRequest(f"{where} must be {allowed}, got {value!r}.{refused}")
        return str(text)

    return convert


def _boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise BadRequest(f"{where} must be true or false, got {value!r}.")
    return value


def _device_ids(value: Any, where: str) -> tuple[int, ...]:
    check = _integer(0)
    if not isinstance(value, list):
        raise BadRequest(f"{where} must be a list of GPU ids, like [0, 1], got {value!r}.")
    return tuple(check(item, where) for item in value)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{where} must be a non-empty string, got {value!r}.")
    return value.strip()


_FRONTEND_KEYS: dict[str, tuple[str, Converter]] = {
    "minWorkers": ("min_workers", _integer(0)),
    "maxWorkers": ("max_workers", _integer(0)),
    "batchSize": ("batch_size", _integer(1)),
    "maxBatchDelay": ("max_batch_delay", _number(positive=False, scale=0.001)),
    "responseTimeout": ("response_timeout", _number(positive=True)),
    "startupTimeout": ("startup_timeout", _number(positive=False)),
    "jobQueueSize": ("job_queue_size", _integer(1)),
    "maxRetryTimeoutInSec": ("max_retry_timeout", _number(positive=False)),
    "clientTimeoutInMills": ("client_timeout_ms", _integer(0)),
    "continuousBatching": ("continuous_batching", _boolean),
    "sequenceBatching": ("sequence_batching", _boolean),
    "sequenceMaxIdleMSec": ("sequence_max_idle_ms", _integer(0)),
    "sequenceTimeoutMSec": ("sequence_timeout_ms", _integer(0)),
    "maxSequenceJobQueueSize": ("max_sequence_job_queue_size", _integer(1)),
    "maxNumSequence": ("max_num_sequence", _integer(1)),
    "deviceType": (
        "device_type",
        _choice("cpu", "gpu", refused=" jupyter_serve runs models on CPUs and NVIDIA GPUs only."),
    ),
    "deviceIds": ("device_ids", _device_ids),
}
_SECTION_KEYS: dict[str, tuple[str, Converter]] = {
    "batchPolicy": ("batch_policy", _choice("eager", "strict")),
    "torchThreads": ("torch_threads", _integer(1)),
    "kernel": ("kernel", _text),
    "metricsConfig": ("metrics_config", _text),
}
