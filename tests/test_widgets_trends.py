"""Throughput, latency percentiles and batch fill derived from successive snapshots."""

from __future__ import annotations

import pytest

from jupyter_serve.kernel.widgets.snapshot import DashboardSnapshot, ModelView, ServerStats, Totals
from jupyter_serve.kernel.widgets.trends import HISTORY, advance, percentile

KEY = ("mnist", "1.0")
MODELS = (ModelView(*KEY),)


def counters(at: float, requests: float, latency_us: float) -> DashboardSnapshot:
    return DashboardSnapshot(at, MODELS, totals={KEY: Totals(requests, latency_us)})


def test_the_first_snapshot_has_no_rates_yet() -> None:
    trend = advance(None, counters(0.0, 10, 10_000)).trends[KEY]
    assert trend.throughput_rps is None
    assert trend.p50_ms is None
    assert trend.throughput_history == ()


def test_rates_and_interval_latency_come_from_counter_deltas() -> None:
    first = advance(None, counters(0.0, 10, 10_000))
    second = advance(first, counters(2.0, 30, 70_000))  # 20 requests, 60 ms total in 2 s
    trend = second.trends[KEY]
    assert trend.throughput_rps == pytest.approx(10.0)
    assert trend.latency_history == (pytest.approx(3.0),)
    assert trend.p50_ms == pytest.approx(3.0)
    assert trend.batch_fill is None  # counters cannot tell


def test_percentiles_are_over_the_per_interval_means() -> None:
    snapshot = advance(None, counters(0.0, 0, 0))
    total_requests, total_latency = 0, 0.0
    for step, mean_ms in enumerate([1.0, 2.0, 3.0, 4.0, 100.0], start=1):
        total_requests += 10
        total_latency += 10 * mean_ms * 1000
        snapshot = advance(snapshot, counters(float(step), total_requests, total_latency))
    trend = snapshot.trends[KEY]
    assert trend.p50_ms == pytest.approx(3.0)
    assert trend.p99_ms == pytest.approx(100.0)
    assert trend.throughput_history == (10.0,) * 5


def test_an_idle_interval_adds_throughput_zero_but_no_latency() -> None:
    first = advance(None, counters(0.0, 5, 5000))
    idle = advance(first, counters(1.0, 5, 5000)).trends[KEY]
    assert idle.throughput_rps == 0.0
    assert idle.latency_history == ()


def test_a_server_restart_resets_the_counters_instead_of_going_negative() -> None:
    first = advance(None, counters(0.0, 100, 100_000))
    after = advance(first, counters(1.0, 4, 8000)).trends[KEY]
    assert after.throughput_rps == pytest.approx(4.0)
    assert after.latency_history == (pytest.approx(2.0),)


def test_history_is_bounded() -> None:
    snapshot = advance(None, counters(0.0, 0, 0))
    for step in range(1, HISTORY + 10):
        snapshot = advance(snapshot, counters(float(step), step, step * 1000.0))
    assert len(snapshot.trends[KEY].throughput_history) == HISTORY


def test_server_figures_win_when_the_server_sends_them() -> None:
    def with_stats(at: float, requests: int) -> DashboardSnapshot:
        stats = ServerStats(requests, throughput_rps=1.0, p50_ms=7.0, p99_ms=20.0, batch_fill=0.5)
        return DashboardSnapshot(at, MODELS, server_stats={KEY: stats})

    first = advance(None, with_stats(0.0, 10))
    assert first.trends[KEY].throughput_rps == 1.0
    trend = advance(first, with_stats(4.0, 30)).trends[KEY]
    assert trend.throughput_rps == 1.0  # the server's own window, as the panel shows it
    assert trend.throughput_history == (1.0, 1.0)
    assert (trend.p50_ms, trend.p99_ms, trend.batch_fill) == (7.0, 20.0, 0.5)
    assert trend.latency_history == (7.0, 7.0)


def test_nearest_rank_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0
