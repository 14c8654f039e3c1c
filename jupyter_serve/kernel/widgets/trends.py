"""Live figures from successive snapshots: throughput, latency p50/p99, batch fill.

TorchServe's Prometheus counters are cumulative, so each poll interval gives one
throughput (requests / seconds) and one mean latency (latency sum / requests).
The p50 and p99 shown are percentiles of those per-interval means over the
recent history (`HISTORY` intervals): a coarse but honest view when only counters
exist. When the server sends its own figures (`ServerStats`, computed from every
request over the server's window), they are shown as they are, so the dashboard
shows what the JupyterLab panel shows at the same moment; the sparklines plot them
poll by poll. Pure functions of frozen data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from jupyter_serve.kernel.widgets.snapshot import DashboardSnapshot, ModelKey, Totals, Trend

__all__ = ["HISTORY", "advance", "percentile"]

HISTORY = 60


def advance(previous: DashboardSnapshot | None, current: DashboardSnapshot) -> DashboardSnapshot:
    """`current` with `trends` derived from the interval since `previous`."""
    trends = {model.key: _trend(model.key, previous, current) for model in current.models}
    return replace(current, trends=trends)


def _trend(key: ModelKey, previous: DashboardSnapshot | None, current: DashboardSnapshot) -> Trend:
    before = previous.trends.get(key, Trend()) if previous else Trend()
    rate, latency = _interval(key, previous, current)
    server = current.server_stats.get(key)
    if server is not None:  # the server's own figures, as the panel shows them
        rate, latency = server.throughput_rps, server.p50_ms
    throughput = _push(before.throughput_history, rate)
    latencies = _push(before.latency_history, latency)
    if server is not None and server.p50_ms is not None:
        return Trend(rate, server.p50_ms, server.p99_ms, server.batch_fill, throughput, latencies)
    ordered = sorted(latencies)
    p50, p99 = percentile(ordered, 50), percentile(ordered, 99)
    return Trend(rate, p50, p99, None, throughput, latencies)


def _interval(
    key: ModelKey, previous: DashboardSnapshot | None, current: DashboardSnapshot
) -> tuple[float | None, float | None]:
    """(requests per second, mean latency in ms) over the last interval, from counters."""
    now = current.totals.get(key)
    if previous is None or now is None:
        return None, None
    seconds = current.taken_at - previous.taken_at
    if seconds <= 0:
        return None, None
    before = previous.totals.get(key, Totals())
    if now.requests < before.requests:  # the server restarted: counters began again
        before = Totals()
    requests = now.requests - before.requests
    latency = (now.latency_us - before.latency_us) / requests / 1000 if requests > 0 else None
    return requests / seconds, latency


def _push(history: tuple[float, ...], value: float | None) -> tuple[float, ...]:
    if value is None:
        return history
    return (*history, value)[-HISTORY:]


def percentile(ordered: Sequence[float], percent: float) -> float | None:
    """Nearest-rank percentile of sorted values; None when there are none."""
    if not ordered:
        return None
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]
