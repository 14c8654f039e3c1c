"""Tests for jupyter_serve.server.metrics.model_stats: a version's rates, the batch items
rate (a continuously batched language model's tokens per second) among them, as
`ServeMetrics.snapshot()` reports them."""

from __future__ import annotations

from jupyter_serve.server.metrics.model_stats import ModelStats, Rate, percentile
from jupyter_serve.server.metrics.serve_metrics import ServeMetrics
from jupyter_serve.server.models import ModelSpec

WINDOW = 10.0  # seconds


class Clock:
    """A clock the test sets."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_rate_counts_events_of_any_size_over_its_window() -> None:
    rate = Rate()
    rate.add(100.2)
    rate.add(100.7, 3)  # the same second: one bucket
    rate.add(104.0, 6)
    assert len(rate.buckets) == 2
    assert rate.per_second(105.0, WINDOW) == 1.0
    assert rate.per_second(110.5, WINDOW) == 0.6  # the second 100 left the window
    assert rate.per_second(115.0, WINDOW) == 0.0


def test_items_per_second_counts_every_request_a_step_carried() -> None:
    """Steps of 3, 2 and 1 running requests: 3 steps, 6 items (6 tokens for causal_lm)."""
    stats = ModelStats(window=100)
    for batch_len, now in ((3, 100.0), (2, 100.4), (1, 101.0)):
        stats.add_batch(batch_len, 4, now)
    summary = stats.summary(101.5, WINDOW)
    assert (summary["batches"], summary["mean_batch_size"]) == (3, 2.0)
    assert summary["steps_per_second"] == 0.3
    assert summary["items_per_second"] == 0.6
    assert stats.summary(111.5, WINDOW)["items_per_second"] == 0.0  # all out of the window


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0


def test_the_snapshot_reports_items_per_second_per_version() -> None:
    clock = Clock(1000.0)
    metrics = ServeMetrics("host1", clock=clock, throughput_seconds=WINDOW,
                           gpu_source=list, host_source=dict)  # fmt: skip
    spec = ModelSpec(model_name="lm", version="1.0", model_dir="/nowhere", handler="causal_lm",
                     manifest={}, batch_size=8, continuous_batching=True)  # fmt: skip
    for batch_len in (1, 2, 2, 1):  # a request joins, a second one, both, the first left
        metrics.record_batch(spec, [], 1.0, batch_len, 0.0)
    (model,) = metrics.snapshot()["models"]
    assert (model["model_name"], model["batches"]) == ("lm", 4)
    assert (model["steps_per_second"], model["items_per_second"]) == (0.4, 0.6)
