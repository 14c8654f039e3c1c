"""`ServeMetrics`: TorchServe's Prometheus metrics and the dashboard's JSON snapshot.

One `ServeMetrics` owns its own `prometheus_client.CollectorRegistry` (never the
global one, so two servers in a process, or tests, never share series). Names and
labels are TorchServe 0.12's (contract §1.5):

- counters `ts_inference_requests_total`, `ts_inference_latency_microseconds`,
  `ts_queue_latency_microseconds` (labels `model_name`, `model_version`, `hostname`);
- counters `Requests2XX`/`Requests4XX`/`Requests5XX` (`Level="Host"`, `Hostname`);
- gauges `QueueTime`, `WorkerThreadTime` (ms; `Level`, `Hostname`), `WorkerLoadTime`
  (ms; `WorkerName`, `Level`, `Hostname`), `HandlerTime`, `PredictionTime` (ms;
  `ModelName`, `Level="Model"`, `Hostname`);
- gauges `GPUUtilization`, `GPUMemoryUtilization`, `GPUMemoryUsed` (`DeviceId`,
  `Level`, `Hostname`), read from `devices.gpu_stats()` at scrape time (none without GPU);
- every metric a handler records (`context.metrics`), created on first sight with
  its dimension names as labels (+ `ModelName`, `Level`, `Hostname` when missing):
  counters add, gauges set, histograms observe.

`render` writes the text as TorchServe's Java client does (see `exposition`):
labels in declaration order with a trailing comma, Java-formatted values,
counters typed `counter` under TorchServe's exact names, and TorchServe's HELP
text ("Torchserve prometheus counter metric with unit: Count").

`WorkerThreadTime` is the time a request spent after leaving the queue (worker
round trip), the nearest thing jupyter_serve measures to TorchServe's value.
"""

from __future__ import annotations

import logging
import math
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from . import devices
from .exposition import write_families

if TYPE_CHECKING:
    from .devices import GpuStats
    from .models import ModelSpec

__all__ = ["HISTOGRAM_BUCKETS", "ServeMetrics"]

log = logging.getLogger(__name__)

HISTOGRAM_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0)
KINDS = ("counter", "gauge", "histogram")
REQUEST_LABELS = ("model_name", "model_version", "hostname")
HOST_LABELS = ("Level", "Hostname")
MODEL_LABELS = ("ModelName", "Level", "Hostname")
_BUILTIN: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    # (name, unit: TorchServe's HELP text names it, kind, labels)
    ("ts_inference_requests_total", "Count", "counter", REQUEST_LABELS),
    ("ts_inference_latency_microseconds", "Microseconds", "counter", REQUEST_LABELS),
    ("ts_queue_latency_microseconds", "Microseconds", "counter", REQUEST_LABELS),
    ("Requests2XX", "Count", "counter", HOST_LABELS),
    ("Requests4XX", "Count", "counter", HOST_LABELS),
    ("Requests5XX", "Count", "counter", HOST_LABELS),
    ("QueueTime", "Milliseconds", "gauge", HOST_LABELS),
    ("WorkerThreadTime", "Milliseconds", "gauge", HOST_LABELS),
    ("WorkerLoadTime", "Milliseconds", "gauge", ("WorkerName", *HOST_LABELS)),
    ("HandlerTime", "ms", "gauge", MODEL_LABELS),
    ("PredictionTime", "ms", "gauge", MODEL_LABELS),
)
_GPU_GAUGES = (
    ("GPUUtilization", "Percent", "utilization"),
    ("GPUMemoryUtilization", "Percent", "memory_used_percent"),
    ("GPUMemoryUsed", "Megabytes", "memory_used_mib"),
)
_BAD_NAME = re.compile(r"[^a-zA-Z0-9_:]")
_BAD_LABEL = re.compile(r"[^a-zA-Z0-9_]")


class _Family:
    """One metric family: values per label tuple, collected as a prometheus `Metric`."""

    def __init__(self, name: str, doc: str, kind: str, labelnames: Sequence[str]) -> None:
        self.name, self.doc, self.kind = name, doc, kind
        self.labelnames = tuple(labelnames)
        self._values: dict[tuple[str, ...], float] = {}
        self._buckets: dict[tuple[str, ...], list[int]] = {}
        self._lock = threading.Lock()

    def update(self, labels: Mapping[str, str], value: float) -> None:
        key = tuple(labels[name] for name in self.labelnames)
        with self._lock:
            if self.kind == "gauge":
                self._values[key] = value
            else:
                self._values[key] = self._values.get(key, 0.0) + value
            if self.kind == "histogram":
                counts = self._buckets.setdefault(key, [0] * (len(HISTOGRAM_BUCKETS) + 1))
                counts[_bucket_index(value)] += 1

    def value(self, labels: Mapping[str, str]) -> float:
        """The current value (a histogram's sum) of one series; 0 if never set."""
        return self._values.get(tuple(labels[name] for name in self.labelnames), 0.0)

    def describe(self) -> list[Metric]:
        return [self._metric()]

    def collect(self) -> list[Metric]:
        metric = self._metric()
        with self._lock:
            for key, value in sorted(self._values.items()):
                labels = dict(zip(self.labelnames, key, strict=True))
                if self.kind == "histogram":
                    _add_histogram(metric, self.name, labels, value, self._buckets[key])
                else:
                    metric.add_sample(self.name, labels, value)
        return [metric]

    def _metric(self) -> Metric:
        """The family under its exact name (`Metric` would strip a counter's `_total`)."""
        metric = Metric(self.name, self.doc, self.kind)
        metric.name = self.name
        return metric


def help_text(kind: str, unit: str) -> str:
    """TorchServe's HELP text for a metric of this kind and unit."""
    return f"Torchserve prometheus {kind} metric with unit: {unit}"


def _bucket_index(value: float) -> int:
    for index, bound in enumerate(HISTOGRAM_BUCKETS):
        if value <= bound:
            return index
    return len(HISTOGRAM_BUCKETS)


def _add_histogram(
    metric: Metric, name: str, labels: dict[str, str], total: float, counts: list[int]
) -> None:
    cumulative = 0
    for bound, count in zip((*HISTOGRAM_BUCKETS, math.inf), counts, strict=True):
        cumulative += count
        metric.add_sample(f"{name}_bucket", {**labels, "le": _le(bound)}, cumulative)
    metric.add_sample(f"{name}_count", labels, cumulative)
    metric.add_sample(f"{name}_sum", labels, total)


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class _GpuCollector:
    """GPU gauges read from NVML at scrape time; no samples without a GPU."""

    def __init__(self, hostname: str, source: Callable[[], Sequence[GpuStats]]) -> None:
        self._hostname = hostname
        self._source = source

    def describe(self) -> list[Metric]:
        return [Metric(name, help_text("gauge", unit), "gauge") for name, unit, _ in _GPU_GAUGES]

    def collect(self) -> list[Metric]:
        stats = self._source()
        metrics = self.describe()
        for metric, (_, _, key) in zip(metrics, _GPU_GAUGES, strict=True):
            for gpu in stats:
                labels = {"DeviceId": str(gpu["id"]), "Level": "Host", "Hostname": self._hostname}
                metric.add_sample(metric.name, labels, float(gpu[key]))  # type: ignore[literal-required]
        return metrics


class _ModelStats:
    """Per model version: counts, a sliding latency window, batch fill and throughput."""

    def __init__(self, window: int) -> None:
        self.requests = 0
        self.statuses: dict[str, int] = {}
        self.latencies_ms: deque[float] = deque(maxlen=window)
        self.completions: deque[list[float]] = deque()  # [second, count]
        self.batches = 0
        self.batched = 0
        self.batch_size = 1

    def add_request(self, status: int, latency_ms: float, now: float) -> None:
        self.requests += 1
        self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1
        self.latencies_ms.append(latency_ms)
        second = float(math.floor(now))
        if self.completions and self.completions[-1][0] == second:
            self.completions[-1][1] += 1
        else:
            self.completions.append([second, 1.0])

    def add_batch(self, batch_len: int, batch_size: int) -> None:
        self.batches += 1
        self.batched += batch_len
        self.batch_size = batch_size

    def throughput(self, now: float, seconds: float) -> float:
        """Requests per second over the last `seconds` (whole seconds, as buckets)."""
        while self.completions and self.completions[0][0] <= now - seconds:
            self.completions.popleft()
        return sum(count for _, count in self.completions) / seconds

    def summary(self, now: float, seconds: float) -> dict[str, Any]:
        latencies = sorted(self.latencies_ms)
        mean_batch = self.batched / self.batches if self.batches else 0.0
        return {
            "requests": self.requests,
            "statuses": dict(sorted(self.statuses.items())),
            "latency_ms": {"p50": _percentile(latencies, 50), "p99": _percentile(latencies, 99)},
            "batches": self.batches,
            "mean_batch_size": mean_batch,
            "batch_size": self.batch_size,
            "batch_fill": mean_batch / self.batch_size,
            "throughput_rps": self.throughput(now, seconds),
        }


def _percentile(ordered: Sequence[float], percent: float) -> float | None:
    """Nearest-rank percentile of sorted values; None when there are none."""
    if not ordered:
        return None
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]


class ServeMetrics:
    """The server's metrics: Prometheus families in a private registry plus dashboard stats.

    `record_batch` matches the pool's `MetricsCallback`; `render` answers `/metrics`
    (with TorchServe's `name[]` filter) and `snapshot` the dashboard.
    """

    def __init__(
        self,
        hostname: str | None = None,
        *,
        window: int = 1000,
        throughput_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        gpu_source: Callable[[], Sequence[GpuStats]] = devices.gpu_stats,
    ) -> None:
        self.hostname = hostname or socket.gethostname()
        self.registry = CollectorRegistry(auto_describe=False)
        self._window = window
        self._seconds = throughput_seconds
        self._clock = clock
        self._families: dict[str, _Family] = {}
        self._models: dict[tuple[str, str], _ModelStats] = {}
        self._lock = threading.Lock()
        self._gpu_source = gpu_source
        for name, unit, kind, labels in _BUILTIN:
            self._add_family(name, help_text(kind, unit), kind, labels)
        self._gpu = _GpuCollector(self.hostname, gpu_source)
        self.registry.register(self._gpu)

    def record_request(
        self,
        model: str,
        version: str | None,
        status: int,
        latency_us: float,
        queue_us: float,
        *,
        served_version: str | None = None,
    ) -> None:
        """One answered inference request: TorchServe's counters and the model's stats.

        `version` is what the request named (None: TorchServe's label "default");
        `served_version` is the version that answered, which keys the dashboard's stats
        so they line up with the batches of that version.
        """
        labels = {"model_name": model, "model_version": version or "default"}
        labels["hostname"] = self.hostname
        self._update("ts_inference_requests_total", labels, 1.0)
        self._update("ts_inference_latency_microseconds", labels, latency_us)
        self._update("ts_queue_latency_microseconds", labels, queue_us)
        if status // 100 in (2, 4, 5):
            self._update(f"Requests{status // 100}XX", self._host(), 1.0)
        self._update("WorkerThreadTime", self._host(), max(0.0, latency_us - queue_us) / 1000)
        with self._lock:
            stats = self._stats(model, served_version or version or "default")
            stats.add_request(status, latency_us / 1000, self._clock())

    def record_batch(
        self,
        spec: ModelSpec,
        metrics: list[dict[str, Any]],
        predict_ms: float,
        batch_len: int,
        queue_ms: float,
    ) -> None:
        """One answered batch (the pool's `on_metrics`): times, batch fill, handler metrics."""
        self._update("QueueTime", self._host(), queue_ms)
        model_labels = {"ModelName": spec.model_name, "Level": "Model", "Hostname": self.hostname}
        self._update("PredictionTime", model_labels, predict_ms)
        with self._lock:
            self._stats(spec.model_name, spec.version).add_batch(batch_len, spec.batch_size)
        for metric in metrics:
            self.record_handler_metric(metric, spec.model_name)

    def record_worker_load(self, worker_name: str, ms: float) -> None:
        """How long a worker took to load its model."""
        self._update("WorkerLoadTime", {"WorkerName": worker_name, **self._host()}, ms)

    def record_handler_metric(self, metric: Mapping[str, Any], model_name: str) -> None:
        """One observation from a worker's `context.metrics`; malformed ones are logged."""
        try:
            name, kind, value, dimensions = _parse_observation(metric)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("Ignoring a malformed handler metric %r: %s", metric, exc)
            return
        labels = {"ModelName": model_name, "Level": "Model", **dimensions}
        labels.setdefault("Hostname", self.hostname)
        family = self._families.get(name)
        if family is None:
            doc = help_text(kind, str(metric.get("unit") or "unit"))
            family = self._try_add_family(name, doc, kind, list(labels))
        if family is None or family.kind != kind or set(family.labelnames) != set(labels):
            log.warning(
                "Ignoring handler metric %s (%s, labels %s): it clashes", name, kind, labels
            )
            return
        family.update(labels, value)

    def value(self, name: str, labels: Mapping[str, str]) -> float:
        """One series' current value (a histogram's sum); 0 if never recorded."""
        return self._families[name].value(labels)

    def forget_model(self, model: str, version: str) -> None:
        """Drop a model version's dashboard stats (its Prometheus series stay, as in TS)."""
        with self._lock:
            self._models.pop((model, version), None)

    def render(self, names: Iterable[str] | None = None) -> bytes:
        """Prometheus text (version 0.0.4) as TorchServe writes it; `names` is its `name[]`."""
        wanted = None if names is None else set(names)
        with self._lock:
            families = list(self._families.values())
        metrics = [m for family in families for m in family.collect()] + self._gpu.collect()
        return write_families(m for m in metrics if wanted is None or m.name in wanted)

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready stats for the dashboard: host counts, per model version, GPUs."""
        now = self._clock()
        with self._lock:
            models = [
                {"model_name": name, "model_version": version, **stats.summary(now, self._seconds)}
                for (name, version), stats in sorted(self._models.items(), key=lambda kv: kv[0])
            ]
        return {
            "hostname": self.hostname,
            "requests": {
                key: int(self.value(f"Requests{key}", self._host()))
                for key in ("2XX", "4XX", "5XX")
            },
            "models": models,
            "gpus": [dict(gpu) for gpu in self._gpu_source()],
        }

    def _host(self) -> dict[str, str]:
        return {"Level": "Host", "Hostname": self.hostname}

    def _stats(self, model: str, version: str) -> _ModelStats:
        """The model version's stats, created on first use (the caller holds the lock)."""
        return self._models.setdefault((model, version), _ModelStats(self._window))

    def _update(self, name: str, labels: Mapping[str, str], value: float) -> None:
        self._families[name].update(labels, value)

    def _try_add_family(
        self, name: str, doc: str, kind: str, labels: Sequence[str]
    ) -> _Family | None:
        """A new family for a handler metric; None if its names clash with another's."""
        try:
            return self._add_family(name, doc, kind, labels)
        except ValueError:  # prometheus_client's DuplicateTimeseries (e.g. "X_sum" vs "X")
            return None

    def _add_family(self, name: str, doc: str, kind: str, labels: Sequence[str]) -> _Family:
        family = _Family(name, doc, kind, labels)
        with self._lock:
            self.registry.register(family)
            self._families[name] = family
        return family


def _parse_observation(metric: Mapping[str, Any]) -> tuple[str, str, float, dict[str, str]]:
    """(name, kind, value, dimensions) of a worker's metric dict, names made Prometheus-safe."""
    name = _BAD_NAME.sub("_", str(metric["name"]))
    kind = str(metric.get("type") or "counter")
    if kind not in KINDS:
        raise ValueError(f"unknown metric type {kind!r}")
    value = float(metric["value"])
    if not name or name[0].isdigit() or math.isnan(value):
        raise ValueError("a metric needs a name not starting with a digit and a number value")
    raw = metric.get("dimensions") or {}
    if not isinstance(raw, Mapping):
        raise TypeError("dimensions must be a mapping")
    return name, kind, value, {_label(key): str(val) for key, val in raw.items()}


def _label(name: Any) -> str:
    label = _BAD_LABEL.sub("_", str(name))
    return f"_{label}" if not label or label[0].isdigit() else label
