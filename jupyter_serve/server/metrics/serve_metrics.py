"""`ServeMetrics`: TorchServe's Prometheus metrics and the dashboard's JSON snapshot.

One `ServeMetrics` owns its own `prometheus_client.CollectorRegistry` (never the
global one, so two servers in a process, or tests, never share series). Which
metrics exist, with which type, unit and label names, is the `metrics_config`
(`metrics_config.MetricsConfig`; TorchServe's default file when none is given):

- its `ts_metrics` are the server's: `ts_inference_requests_total`,
  `ts_inference_latency_microseconds`, `ts_queue_latency_microseconds` (model name,
  version or "default", hostname), `Requests2XX`/`4XX`/`5XX`, `QueueTime`,
  `WorkerThreadTime` (Level="Host", hostname), `WorkerLoadTime` (worker name too),
  and the host and GPU gauges read at scrape time (`host_metrics`). Label values are
  given in TorchServe's order and take the file's label names by position; a metric
  the file leaves out is never recorded;
- its `model_metrics` (and a model's own file, `ModelSpec.model_metrics`) are
  declared with the `Hostname` label added, as TorchServe adds it;
- a handler's observation (`context.metrics`) updates the model metric of its name
  with its dimension values and the hostname, by position: a metric declared without
  dimensions gets only `Hostname`. An undeclared one is created from the
  observation (its dimension names + `Hostname`) when `auto_detect` is on
  (TorchServe's `model_metrics_auto_detect`), else dropped; one that does not fit
  is logged and dropped.

Every declared family is listed, with HELP and TYPE, even before it has a sample,
as TorchServe lists them. `render` writes the text as TorchServe's Java client does
(see `exposition`). `WorkerThreadTime` is the time a request spent after leaving the
queue (worker round trip), the nearest thing jupyter_serve measures to TorchServe's.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from jupyter_serve.server import devices
from jupyter_serve.server.metrics.config import DEFAULT, KINDS, MetricDecl, MetricsConfig
from jupyter_serve.server.metrics.exposition import write_families
from jupyter_serve.server.metrics.family import (
    HISTOGRAM_BUCKETS,
    MetricFamily,
    label_name,
    metric_name,
)
from jupyter_serve.server.metrics.host import GPU_GAUGES, HOST_GAUGES, gpu_readings, host_readings
from jupyter_serve.server.metrics.model_stats import ModelStats

if TYPE_CHECKING:
    from jupyter_serve.server.devices import GpuStats
    from jupyter_serve.server.models import ModelSpec

__all__ = ["HISTOGRAM_BUCKETS", "ServeMetrics"]

log = logging.getLogger(__name__)

HOST = "Host"
Declaration = MetricDecl | Mapping[str, Any]


class ServeMetrics:
    """The server's metrics: Prometheus families in a private registry plus dashboard stats.

    `record_batch` matches the pool's `MetricsCallback`; `render` answers `/metrics`
    (with TorchServe's `name[]` filter) and `snapshot` the dashboard.
    """

    def __init__(
        self,
        hostname: str | None = None,
        *,
        config: MetricsConfig = DEFAULT,
        auto_detect: bool = True,
        window: int = 1000,
        throughput_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        gpu_source: Callable[[], Sequence[GpuStats]] = devices.gpu_stats,
        host_source: Callable[[], Mapping[str, float]] = host_readings,
    ) -> None:
        self.hostname = hostname or socket.gethostname()
        self.auto_detect = auto_detect
        self.registry = CollectorRegistry(auto_describe=False)
        self._window = window
        self._seconds = throughput_seconds
        self._clock = clock
        self._families: dict[str, MetricFamily] = {}
        self._models: dict[tuple[str, str], ModelStats] = {}
        self._lock = threading.Lock()
        self._gpu_source = gpu_source
        self._host_source = host_source
        for decl in config.ts_metrics:
            self._add_family(metric_name(decl.name), decl.unit, decl.kind, decl.dimensions, "ts")
        # the server's own families, fixed from here on (a name keeps its first declaration)
        self._own = {name: f for name, f in self._families.items() if f.owner == "ts"}
        self._host_labels = self._host()
        self._request_families = self._families_per_request()
        self.declare_model_metrics(config.model_metrics)

    # ---- the server's own metrics ----

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
        labels = (model, version or "default", self.hostname)
        requests, latency, queue, _, worker_time = self._request_families
        if requests is not None:
            requests.add(labels, 1.0)
        if latency is not None:
            latency.add(labels, latency_us)
        if queue is not None:
            queue.add(labels, queue_us)
        self.record_status(status)
        if worker_time is not None:
            worker_time.add(self._host_labels, max(0.0, latency_us - queue_us) / 1000)
        with self._lock:
            stats = self._stats(model, served_version or version or "default")
            stats.add_request(status, latency_us / 1000, self._clock())

    def record_status(self, status: int) -> None:
        """An inference answer's status class (`Requests2XX`/`4XX`/`5XX`), including those
        no model version took (an unknown model's 404), which TorchServe counts too."""
        family = self._request_families[3].get(status // 100)
        if family is not None:
            family.add(self._host_labels, 1.0)

    def record_batch(
        self,
        spec: ModelSpec,
        metrics: list[dict[str, Any]],
        predict_ms: float,
        batch_len: int,
        queue_ms: float,
    ) -> None:
        """One answered batch (the pool's `on_metrics`): queue time, batch fill, and the
        handler's metrics (PredictionTime among them, as the worker emits it)."""
        self._record("QueueTime", self._host(), queue_ms)
        with self._lock:
            capacity = spec.batch_size * (2 if spec.continuous_batching and spec.sequence_batching
                                          else 1)  # fmt: skip
            stats = self._stats(spec.model_name, spec.version)
            stats.add_batch(batch_len, capacity, self._clock())
        self.record_handler_metrics(spec, metrics)

    def record_load(
        self, spec: ModelSpec, worker_name: str, load_ms: float, metrics: list[dict[str, Any]]
    ) -> None:
        """A worker loaded (the pool's `on_load`): its WorkerLoadTime and what the handler's
        `initialize` emitted, as TorchServe records both when the worker is up."""
        self.record_worker_load(worker_name, load_ms)
        self.record_handler_metrics(spec, metrics)

    def record_worker_load(self, worker_name: str, ms: float) -> None:
        """How long a worker took to start and load its model (TorchServe's WorkerLoadTime)."""
        self._record("WorkerLoadTime", (worker_name, *self._host()), ms)

    # ---- the handlers' metrics ----

    def declare_model_metrics(self, declarations: Iterable[Declaration]) -> None:
        """Declare model metrics (`MetricDecl`s or workers' declaration dicts), `Hostname`
        added; a name already declared keeps its first declaration."""
        for item in declarations:
            decl = item if isinstance(item, MetricDecl) else _declaration(item)
            name = metric_name(decl.name)
            if name not in self._families:
                self._add_family(name, decl.unit, decl.kind, (*decl.dimensions, "Hostname"))

    def record_handler_metrics(self, spec: ModelSpec, metrics: Iterable[Mapping[str, Any]]) -> None:
        """A worker's observations, after declaring its model's own metrics_config."""
        if spec.model_metrics:
            self.declare_model_metrics(spec.model_metrics)
        for metric in metrics:
            self.record_handler_metric(metric, spec.model_name)

    def record_handler_metric(self, metric: Mapping[str, Any], model_name: str = "") -> None:
        """One observation from a worker's `context.metrics`; what does not fit is logged."""
        try:
            name, kind, value, dimensions = _parse_observation(metric)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("Ignoring a malformed handler metric %r: %s", metric, exc)
            return
        family = self._families.get(name)
        if family is None and self.auto_detect:
            unit = str(metric.get("unit") or "unit")
            family = self._add_family(name, unit, kind, (*dimensions, "Hostname"))
        if family is None:
            return  # neither declared nor auto-detected: TorchServe drops it too
        values = [*dimensions.values(), self.hostname]
        if family.owner != "model" or not family.fits(values):
            fitting = f"{family.name} {list(family.labelnames)}"
            log.warning("Ignoring handler metric %s %s of %s: it does not fit %s", name,
                        list(dimensions), model_name, fitting)  # fmt: skip
            return
        family.update(values, value)

    # ---- reading ----

    def value(self, name: str, labels: Mapping[str, str]) -> float:
        """One series' current value (a histogram's sum); 0 if never recorded or undeclared."""
        family = self._families.get(name)
        if family is None:
            return 0.0
        return family.value([labels[label] for label in family.labelnames])

    def forget_model(self, model: str, version: str) -> None:
        """Drop a model version's dashboard stats (its Prometheus series stay, as in TS)."""
        with self._lock:
            self._models.pop((model, version), None)

    def render(self, names: Iterable[str] | None = None) -> bytes:
        """Prometheus text (version 0.0.4) as TorchServe writes it; `names` is its `name[]`."""
        wanted = None if names is None else set(names)
        with self._lock:
            families = [f for f in self._families.values() if wanted is None or f.name in wanted]
        scraped = self._scraped([f for f in families if f.owner == "ts"])
        return write_families(
            m for family in families for m in scraped.get(family.name, family).collect()
        )

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready stats for the dashboard: host counts, per model version (model_stats.py),
        GPUs."""
        now = self._clock()
        with self._lock:
            models = [
                {"model_name": name, "model_version": version, **stats.summary(now, self._seconds)}
                for (name, version), stats in sorted(self._models.items(), key=lambda kv: kv[0])
            ]
        host = dict(zip(("Level", "Hostname"), self._host(), strict=True))
        return {
            "hostname": self.hostname,
            "requests": {
                key: int(self.value(f"Requests{key}", host)) for key in ("2XX", "4XX", "5XX")
            },
            "models": models,
            "gpus": [dict(gpu) for gpu in self._gpu_source()],
        }

    # ---- helpers ----

    def _host(self) -> tuple[str, str]:
        return (HOST, self.hostname)

    def _stats(self, model: str, version: str) -> ModelStats:
        """The model version's stats, created on first use (the caller holds the lock)."""
        return self._models.setdefault((model, version), ModelStats(self._window))

    def _families_per_request(
        self,
    ) -> tuple[MetricFamily | None, MetricFamily | None, MetricFamily | None,
               dict[int, MetricFamily], MetricFamily | None]:  # fmt: skip
        """What `record_request` updates, looked up once: the three per-model-version
        families, RequestsNXX by status class and WorkerThreadTime, each only when the
        metrics_config has it with the label arity the server gives it."""
        requests, latency, queue = (
            self._own_fitting(name, 3)
            for name in ("ts_inference_requests_total", "ts_inference_latency_microseconds",
                         "ts_queue_latency_microseconds")
        )  # fmt: skip
        by_class = {
            klass: family
            for klass in (2, 4, 5)
            if (family := self._own_fitting(f"Requests{klass}XX", 2)) is not None
        }
        return requests, latency, queue, by_class, self._own_fitting("WorkerThreadTime", 2)

    def _own_fitting(self, name: str, arity: int) -> MetricFamily | None:
        family = self._own.get(name)
        return family if family is not None and len(family.labelnames) == arity else None

    def _record(self, name: str, values: tuple[str, ...], value: float) -> None:
        """Update one of the server's own metrics, if the metrics_config has it as given
        (per batch and per loaded worker; `record_request` looks its families up once)."""
        family = self._own_fitting(name, len(values))
        if family is not None:
            family.add(values, value)

    def _scraped(self, families: list[MetricFamily]) -> dict[str, MetricFamily]:
        """Fresh families for the host and GPU gauges among `families`, read now."""
        names = {family.name for family in families}
        host = self._host_source() if names & set(HOST_GAUGES) else {}
        gpus = gpu_readings(self._gpu_source()) if names & set(GPU_GAUGES) else {}
        fresh: dict[str, MetricFamily] = {}
        for family in families:
            if family.name in HOST_GAUGES or family.name in GPU_GAUGES:
                now = MetricFamily(family.name, family.unit, family.kind, family.labelnames)
                readings = [(self._host(), host[family.name])] if family.name in host else [
                    ((HOST, device, self.hostname), v) for device, v in gpus.get(family.name, [])
                ]  # fmt: skip
                for values, value in readings:
                    if now.fits(values):
                        now.update(values, value)
                fresh[family.name] = now
        return fresh

    def _add_family(
        self, name: str, unit: str, kind: str, labels: Sequence[str], owner: str = "model"
    ) -> MetricFamily | None:
        """A new family; None when its name clashes with another's samples (X vs X_sum)."""
        family = MetricFamily(name, unit, kind, [label_name(n) for n in labels], owner)
        with self._lock:
            try:
                self.registry.register(family)
            except ValueError:  # prometheus_client's duplicate timeseries
                log.warning("Metric %s clashes with another metric's names: not recorded", name)
                return None
            self._families[name] = family
        return family


def _declaration(item: Mapping[str, Any]) -> MetricDecl:
    """A worker declaration dict (`MetricDecl.worker_declaration`) back as a `MetricDecl`."""
    dims = tuple(str(d) for d in item.get("dimensions") or ())
    return MetricDecl(str(item["name"]), str(item["type"]), str(item["unit"]), dims)


def _parse_observation(metric: Mapping[str, Any]) -> tuple[str, str, float, dict[str, str]]:
    """(name, kind, value, dimensions) of a worker's metric dict, names made Prometheus-safe."""
    name = metric_name(metric["name"])
    kind = str(metric.get("type") or "counter")
    if kind not in KINDS:
        raise ValueError(f"unknown metric type {kind!r}")
    value = float(metric["value"])
    if math.isnan(value) or str(metric["name"])[:1].isdigit():
        raise ValueError("a metric needs a name not starting with a digit and a number value")
    raw = metric.get("dimensions") or {}
    if not isinstance(raw, Mapping):
        raise TypeError("dimensions must be a mapping")
    return name, kind, value, {label_name(key): str(val) for key, val in raw.items()}
