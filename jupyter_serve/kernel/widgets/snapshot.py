"""The dashboard's data (`DashboardSnapshot`) and its readers of TorchServe's routes.

A snapshot is plain frozen data read from TorchServe's own routes, so the
dashboard works against TorchServe as well as jupyter_serve:

- `GET models` (every page) for the names, then `GET models/{name}/all` for each:
  versions, workers (id, status, pid, gpu, memoryUsage, gpuUsage), queue
  (`jobQueueStatus`), batch size and worker counts;
- `GET metrics?format=json`: a server that knows the format answers
  `ServeMetrics.snapshot()` JSON (p50/p99, batch fill); any other answers
  Prometheus text, read for the counters `ts_inference_requests_total`,
  `ts_inference_latency_microseconds` and `Requests2XX/4XX/5XX`.

jupyter_serve's own `GET summary` carries all of this in one answer (`fetch.py` reads
it first; these readers are for a server without it).

Requests that name no version are labelled `model_version="default"` (as
TorchServe does); they are credited to the model's default version, which is
the only version or the one `GET models/{name}` describes.
Rates, percentiles and plots are derived from successive snapshots in `trends`.
A describe object may carry a load failure (`loadError`, `error` or `lastError`);
the dashboard shows its text. Nothing here imports ipywidgets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from jupyter_serve.kernel.client import ServeClientError
from jupyter_serve.kernel.widgets import prometheus

__all__ = [
    "DashboardSnapshot",
    "ModelKey",
    "ModelView",
    "ServerStats",
    "SnapshotSource",
    "Totals",
    "Trend",
    "WorkerView",
    "add_totals",
    "describe_versions",
    "fold_default",
    "model_names",
    "model_view",
    "parse_metrics",
    "server_stats",
    "to_float",
    "to_int",
]

ModelKey = tuple[str, str]
ERROR_KEYS = ("loadError", "error", "lastError")
_MAX_PAGES = 100


class SnapshotSource(Protocol):
    """What `fetch_snapshot` needs of `client.ServeClient`."""

    def request(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None
    ) -> Any: ...

    def request_json(self, method: str, path: str, **kwargs: Any) -> Any: ...

    def describe(self, name: str, version: str | None = None, **params: Any) -> list[Any]: ...


@dataclass(frozen=True)
class WorkerView:
    """One worker as describe reports it."""

    id: str
    status: str
    pid: int = -1
    device: str = "cpu"
    memory_bytes: int = 0  # resident size (describe's memoryUsage)
    gpu_usage: str = ""
    own_memory_bytes: int = 0  # its own share (PSS: jupyter_serve's summary), 0 if unknown

    @property
    def ready(self) -> bool:
        return self.status.upper() == "READY"


@dataclass(frozen=True)
class ModelView:
    """One registered model version as describe reports it."""

    name: str
    version: str
    status: str = ""
    min_workers: int = 0
    max_workers: int = 0
    batch_size: int = 1
    workers: tuple[WorkerView, ...] = ()
    pending: int = 0
    remaining_capacity: int = 0
    error: str | None = None
    is_default: bool = False

    @property
    def key(self) -> ModelKey:
        return (self.name, self.version)

    @property
    def loading(self) -> bool:
        """Workers are still starting: some not READY, or fewer than asked for."""
        if self.error is not None:
            return False
        ready = sum(worker.ready for worker in self.workers)
        return ready < len(self.workers) or ready < self.min_workers


@dataclass(frozen=True)
class Totals:
    """Cumulative counters of one model version (Prometheus)."""

    requests: float = 0.0
    latency_us: float = 0.0


@dataclass(frozen=True)
class ServerStats:
    """What a jupyter_serve server computes itself (its JSON metrics snapshot)."""

    requests: int = 0
    throughput_rps: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    batch_fill: float | None = None


@dataclass(frozen=True)
class Trend:
    """Live figures of one model version, derived from successive snapshots."""

    throughput_rps: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    batch_fill: float | None = None
    throughput_history: tuple[float, ...] = ()
    latency_history: tuple[float, ...] = ()


@dataclass(frozen=True)
class DashboardSnapshot:
    """Everything the dashboard shows at one moment; `unreachable` says why it is stale."""

    taken_at: float = 0.0
    models: tuple[ModelView, ...] = ()
    totals: Mapping[ModelKey, Totals] = field(default_factory=dict)
    server_stats: Mapping[ModelKey, ServerStats] = field(default_factory=dict)
    responses: Mapping[str, int] = field(default_factory=dict)
    trends: Mapping[ModelKey, Trend] = field(default_factory=dict)
    unreachable: str | None = None

    def stale(self, reason: str) -> DashboardSnapshot:
        """This snapshot, marked as the last one seen before the server became unreachable."""
        return replace(self, unreachable=reason)


def model_names(client: SnapshotSource) -> list[str]:
    names: list[str] = []
    token: str | None = "0"
    for _ in range(_MAX_PAGES):
        page = client.request_json("GET", "models", params={"limit": 100, "next_page_token": token})
        names += [str(model["modelName"]) for model in page.get("models", [])]
        token = page.get("nextPageToken")
        if not token:
            break
    return names


def describe_versions(client: SnapshotSource, name: str) -> list[ModelView]:
    try:
        entries = client.describe(name, "all")
    except ServeClientError as error:
        if error.status == 404:  # unregistered between the list and the describe
            return []
        raise
    views = [model_view(entry) for entry in entries if isinstance(entry, dict)]
    default = views[0].version if len(views) == 1 else _default_version(client, name)
    return [replace(view, is_default=view.version == default) for view in views]


def _default_version(client: SnapshotSource, name: str) -> str | None:
    """The version unversioned requests go to: what `GET models/{name}` describes."""
    try:
        entries = client.describe(name)
    except ServeClientError:
        return None
    first = entries[0] if entries and isinstance(entries[0], dict) else {}
    return str(first.get("modelVersion") or "") or None


V = TypeVar("V")


def fold_default(
    values: Mapping[ModelKey, V], models: Sequence[ModelView], merge: Callable[[V, V], V]
) -> dict[ModelKey, V]:
    """Credit figures labelled version "default" (requests that named no version, as
    TorchServe labels them) to the model's default version, merged with its own."""
    folded = {key: value for key, value in values.items() if key[1] != "default"}
    defaults = {model.name: model.key for model in models if model.is_default}
    for (name, version), value in values.items():
        target = defaults.get(name) if version == "default" else None
        if target is None:
            folded.setdefault((name, version), value)
        else:
            folded[target] = merge(folded[target], value) if target in folded else value
    return folded


def add_totals(a: Totals, b: Totals) -> Totals:
    return Totals(a.requests + b.requests, a.latency_us + b.latency_us)


def model_view(entry: Mapping[str, Any]) -> ModelView:
    """A `ModelView` from one element of TorchServe's describe-model array."""
    queue = entry.get("jobQueueStatus") or {}
    workers = tuple(_worker(w) for w in entry.get("workers") or [] if isinstance(w, dict))
    min_workers = to_int(entry.get("minWorkers"))
    return ModelView(
        name=str(entry.get("modelName", "")),
        version=str(entry.get("modelVersion") or "default"),
        status=str(entry.get("status") or _health(workers, min_workers)),
        min_workers=min_workers,
        max_workers=to_int(entry.get("maxWorkers")),
        batch_size=to_int(entry.get("batchSize"), 1),
        workers=workers,
        pending=to_int(queue.get("pendingRequests")),
        remaining_capacity=to_int(queue.get("remainingCapacity")),
        error=_error(entry),
    )


def _health(workers: tuple[WorkerView, ...], min_workers: int) -> str:
    """TorchServe's health words for a model version whose describe carries no `status`
    (TorchServe 0.12's never does): the rule of the server's `registry.describe.model_status`."""
    ready = sum(worker.ready for worker in workers)
    if ready >= min_workers:
        return "Healthy"
    return "Partial Healthy" if ready else "Unhealthy"


def _worker(entry: Mapping[str, Any]) -> WorkerView:
    return WorkerView(
        id=str(entry.get("id", "")),
        status=str(entry.get("status", "")),
        pid=to_int(entry.get("pid"), -1),
        device="gpu" if entry.get("gpu") else "cpu",
        memory_bytes=to_int(entry.get("memoryUsage")),
        gpu_usage=str(entry.get("gpuUsage") or ""),
    )


def _error(entry: Mapping[str, Any]) -> str | None:
    for key in ERROR_KEYS:
        value = entry.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def to_int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


Parsed = tuple[dict[ModelKey, Totals], dict[ModelKey, ServerStats], dict[str, int]]


def parse_metrics(body: bytes | str) -> Parsed:
    """(totals, server stats, host response counts) from a metrics answer, JSON or text."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("models"), list):
        return _from_json(data)
    return _from_text(text)


def _from_text(text: str) -> Parsed:
    samples = prometheus.parse_text(text)
    labels = ("model_name", "model_version")
    counts = prometheus.sum_by(samples, "ts_inference_requests_total", labels)
    latency = prometheus.sum_by(samples, "ts_inference_latency_microseconds", labels)
    totals = {
        (name, version): Totals(count, latency.get((name, version), 0.0))
        for (name, version), count in counts.items()
    }
    responses = {
        kind: int(sum(prometheus.sum_by(samples, f"Requests{kind}").values()))
        for kind in ("2XX", "4XX", "5XX")
    }
    return totals, {}, responses


def _from_json(data: Mapping[str, Any]) -> Parsed:
    stats: dict[ModelKey, ServerStats] = {}
    for entry in data["models"]:
        if isinstance(entry, dict):
            key = (str(entry.get("model_name")), str(entry.get("model_version") or "default"))
            stats[key] = server_stats(entry, METRICS_KEYS)
    requests = data.get("requests") or {}
    responses = {kind: to_int(requests.get(kind)) for kind in ("2XX", "4XX", "5XX")}
    return {}, stats, responses


METRICS_KEYS = ("throughput_rps", "latency_ms", "batch_fill")  # metrics?format=json
SUMMARY_KEYS = ("throughputRps", "latencyMs", "batchFill")  # GET summary (fetch.py)


def server_stats(entry: Mapping[str, Any], keys: tuple[str, str, str]) -> ServerStats:
    """A server's own figures of one version; `keys` name throughput, latency, batch fill."""
    throughput, latency_key, fill = keys
    latency = entry.get(latency_key) or {}
    return ServerStats(
        requests=to_int(entry.get("requests")),
        throughput_rps=to_float(entry.get(throughput)),
        p50_ms=to_float(latency.get("p50")),
        p99_ms=to_float(latency.get("p99")),
        batch_fill=to_float(entry.get(fill)),
    )


def to_float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None
