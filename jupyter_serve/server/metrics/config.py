"""TorchServe's `metrics_config` YAML: which metrics `/metrics` has, their type, unit, labels.

The file is TorchServe 0.12's (docs/metrics.md, ts/configs/metrics.yaml)::

    dimensions: [...]            # anchors only; not read
    ts_metrics:                  # the server's own metrics
      counter: [{name, unit, dimensions: [...]}, ...]
      gauge: [...]
      histogram: [...]
    model_metrics:               # metrics handlers emit through context.metrics
      counter | gauge | histogram: [...]

`ts_metrics` says which of the server's metrics exist (one left out is never
recorded) and their unit (the HELP text), type and label names; the values are
the server's, in TorchServe's label order. `model_metrics` are declared in every
worker's `context.metrics` (so `get_metric` finds them) and in `/metrics` with
the `Hostname` label added, as TorchServe adds it. Both sections are optional
(TorchServe's workers refuse a file without `model_metrics`; here it declares none).

`DEFAULT` is TorchServe's own default file, used when no `metrics_config` is given.
Every entry needs a non-empty `name` and `unit` and a `dimensions` list of strings;
anything else is a `BadRequest` naming the file and entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_serve.server.model_config import load_yaml_file
from jupyter_serve.wire.errors import BadRequest

__all__ = ["DEFAULT", "KINDS", "MetricDecl", "MetricsConfig", "load_metrics_config"]

KINDS = ("counter", "gauge", "histogram")
SECTIONS = ("ts_metrics", "model_metrics")


@dataclass(frozen=True)
class MetricDecl:
    """One declared metric: its name, type ("counter", "gauge", "histogram"), unit, labels."""

    name: str
    kind: str
    unit: str
    dimensions: tuple[str, ...] = ()

    def worker_declaration(self) -> dict[str, Any]:
        """What a worker's `context.metrics` declares (`MetricsCache.declare`)."""
        return {"name": self.name, "unit": self.unit, "dimensions": list(self.dimensions),
                "type": self.kind}  # fmt: skip


@dataclass(frozen=True)
class MetricsConfig:
    """A parsed metrics_config: the server's metrics and the models' (as written)."""

    ts_metrics: tuple[MetricDecl, ...] = ()
    model_metrics: tuple[MetricDecl, ...] = ()
    source: str = "TorchServe's default metrics.yaml"

    def worker_declarations(self) -> tuple[dict[str, Any], ...]:
        return tuple(decl.worker_declaration() for decl in self.model_metrics)


def load_metrics_config(path: str | Path) -> MetricsConfig:
    """Read and check a metrics_config file (size- and alias-bounded, as model configs)."""
    file = Path(path)
    if not file.is_file():
        raise BadRequest(f"metrics_config {file}: no such file.")
    return parse_metrics_config(load_yaml_file(file), str(file))


def parse_metrics_config(data: dict[str, Any], source: str) -> MetricsConfig:
    sections = {name: _section(data.get(name), f"{source}: {name}") for name in SECTIONS}
    return MetricsConfig(sections["ts_metrics"], sections["model_metrics"], source)


def _section(value: Any, where: str) -> tuple[MetricDecl, ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise BadRequest(f"{where} must map metric types ({', '.join(KINDS)}) to lists.")
    declared: list[MetricDecl] = []
    for kind, entries in value.items():
        if kind not in KINDS:
            raise BadRequest(f"{where}: invalid metric type {kind!r} (one of {', '.join(KINDS)}).")
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise BadRequest(f"{where}.{kind} must be a list of metrics.")
        declared += [_entry(entry, kind, f"{where}.{kind}[{i}]") for i, entry in enumerate(entries)]
    return tuple(declared)


def _entry(entry: Any, kind: str, where: str) -> MetricDecl:
    if not isinstance(entry, dict):
        raise BadRequest(f"{where} must be a mapping with name, unit and dimensions.")
    name, unit, dims = entry.get("name"), entry.get("unit"), entry.get("dimensions")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{where}: Metric name cannot be empty.")
    if not isinstance(unit, str) or not unit:
        raise BadRequest(f"{where}: Metric unit cannot be empty (metric {name}).")
    if not isinstance(dims, list) or not all(isinstance(d, str) and d for d in dims):
        raise BadRequest(f"{where}: dimensions must be a list of names (metric {name}).")
    return MetricDecl(name, kind, unit, tuple(dims))


_HOST = ("Level", "Hostname")
_REQUESTS = ("model_name", "model_version", "hostname")
_GPU = ("Level", "DeviceId", "Hostname")
_MODEL = ("ModelName", "Level")

DEFAULT = MetricsConfig(
    ts_metrics=(
        MetricDecl("Requests2XX", "counter", "Count", _HOST),
        MetricDecl("Requests4XX", "counter", "Count", _HOST),
        MetricDecl("Requests5XX", "counter", "Count", _HOST),
        MetricDecl("ts_inference_requests_total", "counter", "Count", _REQUESTS),
        MetricDecl("ts_inference_latency_microseconds", "counter", "Microseconds", _REQUESTS),
        MetricDecl("ts_queue_latency_microseconds", "counter", "Microseconds", _REQUESTS),
        MetricDecl("QueueTime", "gauge", "Milliseconds", _HOST),
        MetricDecl("WorkerThreadTime", "gauge", "Milliseconds", _HOST),
        MetricDecl("WorkerLoadTime", "gauge", "Milliseconds", ("WorkerName", *_HOST)),
        MetricDecl("CPUUtilization", "gauge", "Percent", _HOST),
        MetricDecl("MemoryUsed", "gauge", "Megabytes", _HOST),
        MetricDecl("MemoryAvailable", "gauge", "Megabytes", _HOST),
        MetricDecl("MemoryUtilization", "gauge", "Percent", _HOST),
        MetricDecl("DiskUsage", "gauge", "Gigabytes", _HOST),
        MetricDecl("DiskUtilization", "gauge", "Percent", _HOST),
        MetricDecl("DiskAvailable", "gauge", "Gigabytes", _HOST),
        MetricDecl("GPUMemoryUtilization", "gauge", "Percent", _GPU),
        MetricDecl("GPUMemoryUsed", "gauge", "Megabytes", _GPU),
        MetricDecl("GPUUtilization", "gauge", "Percent", _GPU),
    ),
    model_metrics=(
        MetricDecl("HandlerTime", "gauge", "ms", _MODEL),
        MetricDecl("PredictionTime", "gauge", "ms", _MODEL),
    ),
)
