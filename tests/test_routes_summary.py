"""Tests for jupyter_serve.server.http.summary: the panel's one-request view, through jp_fetch.

Models are the PROBE echo handler of route_models, built into the store and served
by real worker subprocesses.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from route_models import gate, register, release, release_if_waiting, serve_state, server_config
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_serve.server.http.summary import model_summary, version_status
from jupyter_serve.server.models import RegisterParams

Fetch = Callable[..., Awaitable[HTTPResponse]]
HANG_GUARD = 60.0  # seconds; only stops a broken worker from hanging the suite


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


async def _summary(jp_fetch: Fetch) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads((await jp_fetch("serve", "summary")).body)
    return answer


def _row(summary: dict[str, Any], name: str, version: str) -> dict[str, Any]:
    rows = [m for m in summary["models"] if (m["modelName"], m["modelVersion"]) == (name, version)]
    assert len(rows) == 1, summary
    return rows[0]


async def test_empty_server_has_no_models(jp_fetch: Fetch) -> None:
    summary = await _summary(jp_fetch)
    assert summary["models"] == []
    assert summary["totals"]["models"] == 0
    assert summary["totals"]["throughputRps"] == 0


async def test_a_served_model_with_its_worker_and_figures(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp, workers=1, batch_size=4)
    before = _row(await _summary(jp_fetch), "probe", "1.0")
    assert before["isDefault"] is True
    assert before["status"] == "healthy"
    assert before["workerCounts"] == {"target": 1, "ready": 1, "starting": 0, "failed": 0}
    assert [w["device"] for w in before["workers"]] == ["cpu"]
    (worker,) = before["workers"]
    assert 0 < worker["memoryOwn"] <= worker["memoryUsage"]  # its share of shared pages
    assert before["batchSize"] == 4
    assert before["requests"] == 0
    assert before["latencyMs"] == {"p50": None, "p99": None}

    for _ in range(3):
        await jp_fetch("serve", "predictions", "probe", method="POST", body="[1]")
    summary = await _summary(jp_fetch)
    after = _row(summary, "probe", "1.0")
    assert after["requests"] == 3
    assert after["latencyMs"]["p50"] > 0
    assert after["latencyMs"]["p99"] >= after["latencyMs"]["p50"]
    assert after["throughputRps"] > 0
    assert 0 < after["batchFill"] <= 1
    assert summary["totals"] == {
        "models": 1,
        "versions": 1,
        "workersReady": 1,
        "throughputRps": after["throughputRps"],
        "requests": {"2XX": 3, "4XX": 0, "5XX": 0},
    }


async def test_versions_and_the_default_marker(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp, version="1.0", workers=0)
    await register(jp_serverapp, version="2.0", workers=0)
    summary = await _summary(jp_fetch)
    assert _row(summary, "probe", "1.0")["isDefault"] is True
    assert _row(summary, "probe", "2.0")["isDefault"] is False
    assert _row(summary, "probe", "2.0")["status"] == "stopped"
    assert summary["totals"]["models"] == 1
    assert summary["totals"]["versions"] == 2

    await jp_fetch("serve", "models", "probe", "2.0", "set-default", method="PUT", body="")
    summary = await _summary(jp_fetch)
    assert _row(summary, "probe", "1.0")["isDefault"] is False
    assert _row(summary, "probe", "2.0")["isDefault"] is True


GATED_LOAD = """
with open({fifo!r}, "rb") as gate:  # the test lets the worker finish loading
    gate.read()


def handle(data, context):
    return [row.get("body") for row in data] if data else None
"""


async def test_a_loading_worker_then_healthy(
    jp_fetch: Fetch, jp_serverapp: Any, tmp_path: Path
) -> None:
    fifo = gate(tmp_path)
    await register(jp_serverapp, name="slow", source=GATED_LOAD.format(fifo=str(fifo)), workers=0)
    try:
        await jp_fetch("serve", "models", "slow", method="PUT", params={"min_worker": 1}, body="")
        loading = _row(await _summary(jp_fetch), "slow", "1.0")
        assert loading["status"] == "loading"
        assert loading["workerCounts"] == {"target": 1, "ready": 0, "starting": 1, "failed": 0}
        await release(fifo)
        registry, _ = serve_state(jp_serverapp)
        pool = registry.get("slow").pool
        await asyncio.wait_for(pool.wait_until(lambda p: p.healthy_count == 1), HANG_GUARD)
        assert _row(await _summary(jp_fetch), "slow", "1.0")["status"] == "healthy"
    finally:
        await release_if_waiting(fifo)


BROKEN = """
raise ValueError("bad weights")  # every worker fails to load


def handle(data, context):
    return data
"""


async def test_a_version_whose_workers_fail_says_why(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    """The newest failed load's cause, as a failed register's error JSON says it, for the
    panel's card; null while no worker is failing."""
    await register(jp_serverapp, name="broken", source=BROKEN, workers=0)
    assert _row(await _summary(jp_fetch), "broken", "1.0")["cause"] is None
    await jp_fetch("serve", "models", "broken", method="PUT", params={"min_worker": 1}, body="")
    registry, _ = serve_state(jp_serverapp)
    model = registry.get("broken")
    await asyncio.wait_for(model.pool.wait_until(lambda p: p.last_load_failure is not None),
                           HANG_GUARD)  # fmt: skip
    restarting = model_summary(model, {"workers": []}, True, {})  # between two of its loads
    assert restarting["workerCounts"]["failed"] == 1
    assert restarting["cause"] == "ValueError: bad weights"
    starting = model_summary(model, {"workers": [{"id": "9000", "status": "UNLOADING"}]}, True, {})
    assert starting["cause"] is None  # nothing failing right now: no cause shown


async def test_many_models_are_all_listed(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    registry, store = serve_state(jp_serverapp)
    await register(jp_serverapp, name="m0", workers=0)
    archive = store / "m0-1.0.mar"
    for index in range(1, 103):  # past one page of `GET models` (100)
        await registry.register(
            archive.name, RegisterParams(model_name=f"m{index}", initial_workers=0)
        )
    summary = await _summary(jp_fetch)
    assert summary["totals"]["models"] == 103
    assert {m["modelName"] for m in summary["models"]} == {f"m{i}" for i in range(103)}


async def test_refused_without_credentials(jp_fetch: Fetch) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("serve", "summary", headers={"Authorization": ""})
    assert caught.value.code == 403


@pytest.mark.parametrize(
    ("counts", "status"),
    [
        ((0, 0, 0, 0), "stopped"),
        ((2, 2, 0, 0), "healthy"),
        ((2, 0, 2, 0), "loading"),
        ((2, 1, 1, 0), "loading"),
        ((2, 1, 0, 1), "degraded"),
        ((1, 0, 0, 1), "failed"),
        ((2, 0, 1, 1), "loading"),
    ],
)
def test_version_status(counts: tuple[int, int, int, int], status: str) -> None:
    assert version_status(*counts) == status


SEQUENCE_CONFIG = """\
continuousBatching: true
sequenceBatching: true
sequenceMaxIdleMSec: 60000
maxNumSequence: 3
batchSize: 2
"""


async def test_a_stateful_model_shows_its_open_sequences_and_steps(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    """A sequence-batching, continuously batched version: its open sequences (of
    maxNumSequence) and its steps per second; a plain version has neither."""
    await register(jp_serverapp, "plain")
    await register(jp_serverapp, "stateful", model_config=SEQUENCE_CONFIG)
    before = _row(await _summary(jp_fetch), "stateful", "1.0")
    assert (before["continuousBatching"], before["sequences"]) == (True, {"open": 0, "max": 3})
    assert before["steps"] == 0
    answer = await jp_fetch("serve", "predictions", "stateful", method="POST", body=b"hi",
                            headers={"Content-Type": "application/octet-stream"})  # fmt: skip
    assert answer.headers["ts_request_sequence_id"].startswith("ts-seq-")
    summary = await _summary(jp_fetch)
    after = _row(summary, "stateful", "1.0")
    assert after["sequences"] == {"open": 1, "max": 3}  # open until its idle time passes
    assert after["stepsPerSecond"] > 0
    assert after["steps"] == 1  # one request, answered in one step
    plain = _row(summary, "plain", "1.0")
    assert (plain["continuousBatching"], plain["sequences"]) == (False, None)
