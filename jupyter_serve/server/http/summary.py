"""`GET serve/summary`: every model version and its live figures in one JSON answer.

The JupyterLab "Serving" panel (`labextension/`) refreshes every few seconds;
with TorchServe's routes alone it would need `GET models` (every page), one
`GET models/{m}/all` per model and `GET metrics?format=json` each time. This
route answers what the panel shows in one request, read from the registry and
`ServeMetrics.snapshot()`:

    {"models": [{"modelName", "modelVersion", "isDefault", "status",
                 "torchserveStatus", "minWorkers", "maxWorkers", "batchSize",
                 "maxBatchDelay", "deviceType", "workers": [{"id", "status",
                 "device", "pid", "memoryUsage", "memoryOwn", "gpuUsage"}],
                 "workerCounts": {"target", "ready", "starting", "failed"}, "cause",
                 "queue": {"pending", "remainingCapacity"}, "requests",
                 "throughputRps", "latencyMs": {"p50", "p99"}, "batchFill",
                 "continuousBatching", "steps", "stepsPerSecond", "inFlight",
                 "sequences": {"open", "max"} | null, "languageModel",
                 "tokensPerSecond"}, ...],
     "totals": {"models", "versions", "workersReady", "throughputRps",
                "requests": {"2XX", "4XX", "5XX"}}}

A worker's `memoryUsage` is describe's (resident size, as TorchServe reports it);
`memoryOwn` is its own share (proportional set size, `server/pool/stats.py`): what one more
worker costs. `cause` says why the workers of a version with failed ones failed
(the newest failed load, as a failed register's error JSON says it:
server/registry/start_failure.py), else null. The panel and the notebook dashboard
(`widgets/`) both read this answer, so they show the same figures at the same moment.

`steps` counts the handler calls a version's workers answered (a continuous batch's
steps; batches for other models), `stepsPerSecond` them per second; `inFlight` is the
number of requests running in its continuous batches (server/pool/continuous.py; null
without continuous batching); `sequences` is null unless the version has sequence
batching (server/sequences.py).

`languageModel` says the version's handler is a language model's (`causal_lm`: the
OpenAI routes serve it, server/http/openai.py). Continuously batched, each of its steps
gives one token to every request it runs, so its `tokensPerSecond` is the rate of the
requests its steps carried (`items_per_second`, server/metrics/model_stats.py); null for
other models, and for a language model without continuous batching (one handler call
then runs its requests to their ends).

`status` is the panel's word for a version: ``healthy`` (every wanted worker
ready), ``loading`` (workers still starting), ``degraded`` (some serving, some
failed and restarting), ``failed`` (none serving, some failed) or ``stopped``
(no worker wanted). A worker is "failed" while its slot has no live worker (it
died or failed to load and waits for its restart). Authorized as ``read``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jupyter_serve.server.http.access import READ, allow
from jupyter_serve.server.http.base import ServeRoute
from jupyter_serve.server.http.openai import is_language_model
from jupyter_serve.server.pool.stats import pss_bytes
from jupyter_serve.server.registry import Model
from jupyter_serve.server.registry.describe import model_status
from jupyter_serve.server.registry.start_failure import failure_cause
from jupyter_serve.server.sequences import SequenceBatcher

__all__ = ["ROUTES", "SummaryRoute", "model_summary", "summary", "version_status"]

Stats = Mapping[tuple[str, str], Mapping[str, Any]]
_NO_STATS: Mapping[str, Any] = {}


def version_status(target: int, ready: int, starting: int, failed: int) -> str:
    """The panel's status word for a version's worker counts (module docstring)."""
    if target == 0:
        return "stopped"
    if ready >= target:
        return "healthy"
    if failed and ready:
        return "degraded"
    if failed and not starting:
        return "failed"
    return "loading"


def _worker(entry: Mapping[str, Any]) -> dict[str, Any]:
    pid = entry.get("pid")
    return {
        "id": entry.get("id"),
        "status": entry.get("status"),
        "device": "gpu" if entry.get("gpu") else "cpu",
        "pid": pid,
        "memoryUsage": entry.get("memoryUsage"),
        "memoryOwn": pss_bytes(pid) if isinstance(pid, int) and pid > 0 else 0,
        "gpuUsage": entry.get("gpuUsage"),
    }


def model_summary(
    model: Model, described: Mapping[str, Any], is_default: bool, stats: Mapping[str, Any]
) -> dict[str, Any]:
    """One version: its describe object's essentials, worker counts and live figures."""
    workers = [_worker(w) for w in described.get("workers") or []]
    ready = sum(w["status"] == "READY" for w in workers)
    target = model.pool.worker_count
    failed = max(0, target - len(workers))
    starting = len(workers) - ready
    latency = stats.get("latency_ms") or {}
    continuous = model.spec.continuous_batching
    language = is_language_model(model)
    tokens = language and continuous  # a step is then one token per request (docstring)
    return {
        "modelName": model.name,
        "modelVersion": model.version,
        "isDefault": is_default,
        "status": version_status(target, ready, starting, failed),
        "torchserveStatus": model_status(model),
        **{key: described.get(key) for key in _DESCRIBED},
        "workers": workers,
        "workerCounts": {"target": target, "ready": ready, "starting": starting, "failed": failed},
        "cause": _cause(model) if failed else None,
        "queue": {
            "pending": model.batcher.pending_count,
            "remainingCapacity": model.batcher.remaining_capacity,
        },
        "requests": stats.get("requests", 0),
        "throughputRps": stats.get("throughput_rps", 0.0),
        "latencyMs": {"p50": latency.get("p50"), "p99": latency.get("p99")},
        "batchFill": stats.get("batch_fill"),
        "continuousBatching": continuous,
        "steps": stats.get("batches", 0),
        "stepsPerSecond": stats.get("steps_per_second", 0.0),
        "inFlight": model.pool.running_count if continuous else None,
        "sequences": _sequences(model),
        "languageModel": language,
        "tokensPerSecond": stats.get("items_per_second", 0.0) if tokens else None,
    }


def _sequences(model: Model) -> dict[str, int] | None:
    """A sequence-batching version's open sequences and their limit; None for others."""
    if not isinstance(model.batcher, SequenceBatcher):
        return None
    return {"open": len(model.batcher.sequences), "max": model.spec.max_num_sequence}


def _cause(model: Model) -> str | None:
    failure = model.pool.last_load_failure
    return None if failure is None else failure_cause(failure)


_DESCRIBED = ("minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "deviceType", "modelUrl")


def _stats_by_version(snapshot: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {
        (str(entry.get("model_name")), str(entry.get("model_version"))): entry
        for entry in snapshot.get("models") or []
        if isinstance(entry, Mapping)
    }


def _stats_for(stats: Stats, model: Model, is_default: bool) -> Mapping[str, Any]:
    """The version's figures; requests that named no version (TorchServe's label
    "default") count for the default version when they are all it has."""
    own = stats.get((model.name, model.version))
    unnamed = stats.get((model.name, "default")) if is_default else None
    candidates = [entry for entry in (own, unnamed) if entry is not None]
    return max(candidates, key=lambda entry: entry.get("requests", 0), default=_NO_STATS)


def _names(route: ServeRoute) -> Iterator[str]:
    """Every registered model name, through the list's pages."""
    token = 0
    while True:
        page = route.registry.list_models(next_page_token=token)
        yield from (str(entry["modelName"]) for entry in page["models"])
        if "nextPageToken" not in page:
            return
        token = int(page["nextPageToken"])


def summary(route: ServeRoute) -> dict[str, Any]:
    """The whole answer of `GET serve/summary` (module docstring)."""
    snapshot = route.metrics.snapshot()
    stats = _stats_by_version(snapshot)
    models = []
    for name in _names(route):
        default = route.registry.default_version(name)
        for model in route.registry.versions(name):
            is_default = model.version == default
            described = route.registry.describe(name, model.version)[0]
            models.append(
                model_summary(model, described, is_default, _stats_for(stats, model, is_default))
            )
    return {"models": models, "totals": _totals(models, snapshot)}


def _totals(models: list[dict[str, Any]], snapshot: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "models": len({model["modelName"] for model in models}),
        "versions": len(models),
        "workersReady": sum(model["workerCounts"]["ready"] for model in models),
        "throughputRps": sum(model["throughputRps"] or 0.0 for model in models),
        "requests": dict(snapshot.get("requests") or {}),
    }


class SummaryRoute(ServeRoute):
    """`GET summary`: the panel's one request per refresh."""

    @allow(READ)
    def get(self) -> None:
        self.write_json(summary(self))


ROUTES: list[tuple[str, type[Any]]] = [
    (r"summary/?", SummaryRoute),
]
