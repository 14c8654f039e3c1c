"""The dashboard's figures of one model version, kept by `ServeMetrics` (serve_metrics.py).

`ModelStats` counts a version's answered requests (by status), keeps a sliding window of
their latencies, its batches' fill, and three rates over the last seconds (`Rate`):
requests answered, batches (a continuous batch's steps) and batch items. The items rate
is a language model's tokens per second when it is continuously batched: each step of
the built-in `causal_lm` handler gives one token to every request it runs
(jupyter_serve/handlers/causal_lm.py), so a step of `n` requests is `n` tokens.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

__all__ = ["ModelStats", "Rate", "percentile"]


class Rate:
    """Events per second over a window, counted in whole-second buckets."""

    def __init__(self) -> None:
        self.buckets: deque[list[float]] = deque()  # [second, count]

    def add(self, now: float, count: float = 1.0) -> None:
        """`count` events at `now`."""
        second = now // 1.0
        buckets = self.buckets
        if buckets and buckets[-1][0] == second:
            buckets[-1][1] += count
        else:
            buckets.append([second, count])

    def per_second(self, now: float, seconds: float) -> float:
        """Events per second over the last `seconds`."""
        while self.buckets and self.buckets[0][0] <= now - seconds:
            self.buckets.popleft()
        return sum(count for _, count in self.buckets) / seconds


class ModelStats:
    """Per model version: counts, a sliding latency window, batch fill, throughput,
    batches (a continuous batch's steps) per second and batch items per second."""

    def __init__(self, window: int) -> None:
        self.requests = 0
        self.statuses: dict[str, int] = {}
        self.latencies_ms: deque[float] = deque(maxlen=window)
        self.completions = Rate()
        self.steps = Rate()
        self.items = Rate()
        self.batches = 0
        self.batched = 0
        self.batch_size = 1

    def add_request(self, status: int, latency_ms: float, now: float) -> None:
        """One answered request."""
        self.requests += 1
        code = str(status)
        self.statuses[code] = self.statuses.get(code, 0) + 1
        self.latencies_ms.append(latency_ms)
        self.completions.add(now)

    def add_batch(self, batch_len: int, batch_size: int, now: float) -> None:
        """One answered handler call of `batch_len` requests (of at most `batch_size`)."""
        self.batches += 1
        self.batched += batch_len
        self.batch_size = batch_size
        self.steps.add(now)
        self.items.add(now, batch_len)

    def summary(self, now: float, seconds: float) -> dict[str, Any]:
        """The snapshot's entry for this version (rates over the last `seconds`)."""
        latencies = sorted(self.latencies_ms)
        mean_batch = self.batched / self.batches if self.batches else 0.0
        return {
            "requests": self.requests,
            "statuses": dict(sorted(self.statuses.items())),
            "latency_ms": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99)},
            "batches": self.batches,
            "mean_batch_size": mean_batch,
            "batch_size": self.batch_size,
            "batch_fill": mean_batch / self.batch_size,
            "throughput_rps": self.completions.per_second(now, seconds),
            "steps_per_second": self.steps.per_second(now, seconds),
            "items_per_second": self.items.per_second(now, seconds),
        }


def percentile(ordered: Sequence[float], percent: float) -> float | None:
    """Nearest-rank percentile of sorted values; None when there are none."""
    if not ordered:
        return None
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]
