"""`fetch_snapshot(client)`: a `DashboardSnapshot` of a server (the panel's figures if it has them).

A jupyter_serve server answers `GET summary` (server/http/summary.py) with every version,
its workers (each with its own memory: `memoryOwn`, the proportional set size) and
the server's own figures (throughput, p50/p99 and batch fill over its window), the
very answer the JupyterLab panel shows: reading it makes the notebook dashboard and
the panel agree at the same moment. A server without that route (TorchServe: 404)
is read through its own routes instead (`snapshot.py`: describe and metrics).
Rates, percentiles and plots are derived from successive snapshots (`trends.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from jupyter_serve.kernel.client import ServeClientError
from jupyter_serve.kernel.widgets.snapshot import (
    SUMMARY_KEYS,
    DashboardSnapshot,
    ModelView,
    SnapshotSource,
    WorkerView,
    add_totals,
    describe_versions,
    fold_default,
    model_names,
    parse_metrics,
    server_stats,
    to_int,
)
from jupyter_serve.kernel.widgets.trends import advance

__all__ = ["fetch_snapshot", "from_summary"]

NO_SUMMARY = (404, 405)  # a server without the route (TorchServe)


def fetch_snapshot(
    client: SnapshotSource,
    previous: DashboardSnapshot | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> DashboardSnapshot:
    """Read the server's models and figures; trends are derived against `previous`.

    Raises:
        OSError: the server cannot be reached (urllib's `URLError` is one).
        ServeClientError: the server answered an error to a route it has.
    """
    try:
        summary = client.request_json("GET", "summary")
    except ServeClientError as error:
        if error.status not in NO_SUMMARY:
            raise
        return advance(previous, _from_torchserve_routes(client, clock()))
    return advance(previous, from_summary(summary, clock()))


def from_summary(summary: Mapping[str, Any], taken_at: float) -> DashboardSnapshot:
    """A snapshot of `GET summary`'s answer (its figures are the server's own)."""
    entries = [entry for entry in summary.get("models") or [] if isinstance(entry, Mapping)]
    models = tuple(_model(entry) for entry in entries)
    stats = {
        model.key: server_stats(entry, SUMMARY_KEYS)
        for model, entry in zip(models, entries, strict=True)
    }
    requests = (summary.get("totals") or {}).get("requests") or {}
    responses = {kind: to_int(requests.get(kind)) for kind in ("2XX", "4XX", "5XX")}
    return DashboardSnapshot(taken_at, models, {}, stats, responses)


def _model(entry: Mapping[str, Any]) -> ModelView:
    queue = entry.get("queue") or {}
    return ModelView(
        name=str(entry.get("modelName", "")),
        version=str(entry.get("modelVersion") or "default"),
        status=str(entry.get("torchserveStatus") or ""),
        min_workers=to_int(entry.get("minWorkers")),
        max_workers=to_int(entry.get("maxWorkers")),
        batch_size=to_int(entry.get("batchSize"), 1),
        workers=tuple(_worker(w) for w in entry.get("workers") or [] if isinstance(w, Mapping)),
        pending=to_int(queue.get("pending")),
        remaining_capacity=to_int(queue.get("remainingCapacity")),
        is_default=bool(entry.get("isDefault")),
    )


def _worker(entry: Mapping[str, Any]) -> WorkerView:
    return WorkerView(
        id=str(entry.get("id", "")),
        status=str(entry.get("status", "")),
        pid=to_int(entry.get("pid"), -1),
        device=str(entry.get("device") or "cpu"),
        memory_bytes=to_int(entry.get("memoryUsage")),
        gpu_usage=str(entry.get("gpuUsage") or ""),
        own_memory_bytes=to_int(entry.get("memoryOwn")),
    )


def _from_torchserve_routes(client: SnapshotSource, taken_at: float) -> DashboardSnapshot:
    """`GET models` (every page), each model's describe, `GET metrics?format=json`."""
    models = tuple(view for name in model_names(client) for view in describe_versions(client, name))
    metrics = client.request("GET", "metrics", params={"format": "json"}).body
    totals, stats, responses = parse_metrics(metrics)
    totals = fold_default(totals, models, add_totals)
    stats = fold_default(stats, models, lambda a, b: max(a, b, key=lambda s: s.requests))
    return DashboardSnapshot(taken_at, models, totals, stats, responses)
