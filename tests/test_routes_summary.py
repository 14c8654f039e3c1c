"""Tests for jupyter_serve.server.http.summary: the panel's one-request view, through jp_fetch.

Models are the PROBE echo handler of route_models (or a handler of this module, or the
tiny language model of lm_models), built into the store and served by real worker
subprocesses.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from lm_models import archive_lm, tiny_lm
from route_models import gate, register, release, release_if_waiting, serve_state, server_config
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPResponse

from jupyter_serve.server.http.summary import model_summary, version_status
from jupyter_serve.server.models import RegisterParams

__all__ = ["tiny_lm"]  # the session fixture, imported for the language model's tests

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


# A continuously batched handler whose request takes two steps: the first answers
# "started;", the second waits at the FIFO the request's body names, then ends it.
GATED_STEPS = """
gates = {}


def handle(data, context):
    if data is None:
        return None
    outputs = []
    for idx, row in enumerate(data):
        request_id = context.get_request_id(idx)
        if request_id not in gates:
            gates[request_id] = bytes(row["body"]).decode()
            outputs.append("started;")
        else:
            with open(gates.pop(request_id), "rb") as gate:
                gate.read()
            outputs.append("done;")
    context.stopping_criteria = [
        lambda item, rid=context.get_request_id(idx): rid not in gates for idx in range(len(data))
    ]
    return outputs
"""
CONTINUOUS_CONFIG = "continuousBatching: true\nbatchSize: 4\nmaxBatchDelay: 0\n"


async def test_requests_in_flight_are_those_running_in_the_continuous_batch(
    jp_fetch: Fetch, jp_serverapp: Any, jp_http_port: int, jp_base_url: str, tmp_path: Path
) -> None:
    """`inFlight`: the requests a continuous batch runs now (not those queued), back to 0
    once answered; null for a model without continuous batching."""
    await register(jp_serverapp, "stepper", source=GATED_STEPS, model_config=CONTINUOUS_CONFIG)
    await register(jp_serverapp, "plain")
    at_rest = await _summary(jp_fetch)
    assert _row(at_rest, "stepper", "1.0")["inFlight"] == 0
    assert _row(at_rest, "plain", "1.0")["inFlight"] is None
    fifo = gate(tmp_path)
    first_chunk = asyncio.Event()
    token = jp_serverapp.identity_provider.token
    answer = asyncio.ensure_future(AsyncHTTPClient().fetch(
        f"http://localhost:{jp_http_port}{jp_base_url}serve/predictions/stepper", method="POST",
        body=str(fifo).encode(), request_timeout=HANG_GUARD,
        headers={"Authorization": f"token {token}", "Content-Type": "application/octet-stream"},
        streaming_callback=lambda chunk: first_chunk.set(),
    ))  # fmt: skip
    try:
        await asyncio.wait_for(first_chunk.wait(), HANG_GUARD)  # its first step answered
        running = _row(await _summary(jp_fetch), "stepper", "1.0")
        assert (running["inFlight"], running["queue"]["pending"]) == (1, 0)
        await release(fifo)
        assert (await answer).code == 200
    finally:
        await release_if_waiting(fifo)
        if not answer.done():
            answer.cancel()
    after = _row(await _summary(jp_fetch), "stepper", "1.0")
    assert (after["inFlight"], after["steps"]) == (0, 2)
    assert (after["languageModel"], after["tokensPerSecond"]) == (False, None)


CHAT = {"messages": [{"role": "user", "content": "What is a tuple?"}], "temperature": 0}


async def test_a_language_model_shows_its_tokens_per_second(
    jp_fetch: Fetch, jp_serverapp: Any, tiny_lm: Path
) -> None:
    """A `causal_lm` version is a language model; each of its steps gives one token to each
    request it runs, so its tokens per second over steps per second is the tokens its
    answers got over the steps that made them, whether the requests shared steps or not."""
    registry, store = serve_state(jp_serverapp)
    archive_lm(tiny_lm, store)
    await registry.register("tinylm.mar", RegisterParams(initial_workers=1, response_timeout=60,
                                                         startup_timeout=60))  # fmt: skip
    await register(jp_serverapp, "plain")
    before = _row(await _summary(jp_fetch), "tinylm", "1.0")
    assert (before["languageModel"], before["continuousBatching"]) == (True, True)
    assert (before["tokensPerSecond"], before["inFlight"]) == (0, 0)

    async def chat(tokens: int) -> int:
        body = json.dumps({"model": "tinylm", "max_tokens": tokens, **CHAT})
        answer = await jp_fetch("serve", "v1", "chat", "completions", method="POST", body=body)
        usage: int = json.loads(answer.body)["usage"]["completion_tokens"]
        return usage

    one = await chat(12)
    alone = _row(await _summary(jp_fetch), "tinylm", "1.0")
    assert (one, alone["steps"]) == (12, 12)  # one token a step
    assert alone["tokensPerSecond"] == alone["stepsPerSecond"] > 0
    more = sum(await asyncio.gather(chat(9), chat(5)))
    summary = await _summary(jp_fetch)
    after = _row(summary, "tinylm", "1.0")
    ratio = after["tokensPerSecond"] / after["stepsPerSecond"]
    assert ratio == pytest.approx((one + more) / after["steps"])
    assert after["inFlight"] == 0
    plain = _row(summary, "plain", "1.0")
    assert (plain["languageModel"], plain["tokensPerSecond"]) == (False, None)
