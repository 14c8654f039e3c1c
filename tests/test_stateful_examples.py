"""TorchServe 0.12's stateful examples, unchanged, on jupyter_serve and on a real TorchServe.

Both example handlers (tests/data/torchserve_stateful) are archived once and registered,
two workers each, on `jupyter serve` and on TorchServe 0.12 (its venv, as the benchmark
makes it). The same scripted sessions (tests/stateful_sessions.py) go to both: two named
sequences interleaved (sequence batching); a sequence left idle past its idle time and
named again; two server-started sequences interleaved; start, a step, a stream cancelled
after its first chunk, an end; a client that leaves mid-stream (sequence + continuous
batching). jupyter_serve's transcripts must hold the values TorchServe's own tests expect,
and equal TorchServe's request by request: status, body chunk by chunk, sequence and
streaming headers, error JSON. One difference is by design: jupyter_serve names the
sequence in every answer, where TorchServe leaves that to the handler (the
sequence_batching example does not).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_process import TOKEN, ServeProcess
from stateful_sessions import (
    SEQUENCE_ID,
    Target,
    build_archives,
    cancel_session,
    disconnect_session,
    idle_session,
    interleaved_sessions,
    sequence_sessions,
)
from torchserve_process import TorchServeProcess, free_port, skip_reason, torchserve_bin

Scenario = Callable[[Target], Coroutine[Any, Any, list[dict[str, Any]]]]
REGISTER_TIMEOUT = 600.0  # seconds: the first register pip-installs lru-dict
PREDICTION_FAILED = {"code": 503, "type": "InternalServerException", "message": "Prediction failed"}


def without_cause(answer: dict[str, Any]) -> dict[str, Any]:
    """`answer` without the handler's exception, which jupyter_serve's error JSON adds as
    `cause` (README: Errors)."""
    body = answer["body"]
    if isinstance(body, dict):
        return {**answer, "body": {k: v for k, v in body.items() if k != "cause"}}
    return answer


def ok(body: str, **headers: str) -> dict[str, Any]:
    return {"status": 200, "body": [body], "headers": {SEQUENCE_ID: "<seq>", **headers}}


class Served:
    """One server with both example models registered; `run` replays a scenario on it."""

    def __init__(self, management: str, predictions: str, headers: dict[str, str]) -> None:
        self.management, self.headers = management, headers
        self.target = Target(predictions, tuple(headers.items()))

    def register(self, model: str) -> None:
        params = {"url": f"{model}.mar", "initial_workers": "2", "synchronous": "true"}
        reply = httpx.post(f"{self.management}models", params=params, headers=self.headers,
                           timeout=REGISTER_TIMEOUT)  # fmt: skip
        assert reply.status_code == 200, reply.text

    def run(self, scenario: Scenario) -> list[dict[str, Any]]:
        return asyncio.run(asyncio.wait_for(scenario(self.target), REGISTER_TIMEOUT))


def replay(served: Served) -> dict[str, list[dict[str, Any]]]:
    """Every session, in an order that gives each server the same history: the idle one
    first on a fresh model, so that its new sequence goes to the other worker on both."""
    served.register("continuous")
    transcripts = {"idle": served.run(idle_session)}
    for name, scenario in (("interleaved", interleaved_sessions), ("cancel", cancel_session),
                           ("disconnect", disconnect_session)):  # fmt: skip
        transcripts[name] = served.run(scenario)
    served.register("sequence")
    transcripts["sequence"] = served.run(sequence_sessions)
    return transcripts


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("stateful") / "store"
    folder.mkdir()
    build_archives(folder)
    return folder


@pytest.fixture(scope="module")
def ours(store: Path) -> Iterator[dict[str, list[dict[str, Any]]]]:
    args = [f"--model-store={store}", "--ncs", "--ServeApp.install_py_dep_per_model=True"]
    server = ServeProcess(store.parent / "jupyter", args)
    try:
        server.start()
        base = f"{server.url}serve/"
        yield replay(Served(base, base, {"Authorization": f"token {TOKEN}"}))
    finally:
        server.stop()


@pytest.fixture(scope="module")
def theirs(store: Path) -> Iterator[dict[str, list[dict[str, Any]]]]:
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    work = store.parent / "torchserve"
    work.mkdir()
    ports = {api: free_port() for api in ("inference", "management", "metrics")}
    lines = [f"{api}_address=http://127.0.0.1:{port}" for api, port in ports.items()]
    lines += [f"grpc_{api}_port={free_port()}" for api in ("inference", "management")]
    lines += ["install_py_dep_per_model=true", f"model_store={store}"]
    (work / "config.properties").write_text("\n".join(lines) + "\n")
    args = ["--disable-token-auth", "--enable-model-api", "--model-store", str(store),
            "--ts-config", str(work / "config.properties")]  # fmt: skip
    torchserve = TorchServeProcess(work, torchserve_bin(work / "venv.log"), args, {})
    try:
        torchserve.wait_for("Model server started")
        served = Served(f"http://127.0.0.1:{ports['management']}/",
                        f"http://127.0.0.1:{ports['inference']}/", {})  # fmt: skip
        yield replay(served)
    finally:
        torchserve.stop()


def test_jupyter_serve_gives_the_answers_torchserve_s_tests_expect(
    ours: dict[str, list[dict[str, Any]]],
) -> None:
    issued = {SEQUENCE_ID: "ts-seq-*"}
    assert [without_cause(answer) for answer in ours["idle"]] == [
        {"status": 200, "body": ["2"], "headers": issued},
        {"status": 503, "body": PREDICTION_FAILED, "headers": {}},
    ]
    assert "KeyError" in ours["idle"][1]["body"]["cause"]  # the handler's own failure
    values = [body for answer in ours["interleaved"] for body in answer["body"]]
    assert values == ["2", "6", "12", "20", "30", "4", "12", "24", "40", "60"]
    stream = {SEQUENCE_ID: "<seq>", "ts_stream_next": "true"}
    assert ours["cancel"] == [
        {"status": 200, "body": ["2"], "headers": issued},
        ok("6"),
        {"status": 200, "body": ["9", "9", "9"], "headers": stream},
        ok("-1"),
        ok("9", ts_request_sequence_end="<seq>"),
    ]
    assert ours["disconnect"] == [
        {"status": 200, "body": ["2"], "headers": issued},
        {"status": 200, "body": ["5"], "headers": stream},  # then the client left
        ok("5", ts_request_sequence_end="<seq>"),
    ]
    sums = [answer["body"] for answer in ours["sequence"]]
    assert sums == [[str(n)] for n in (1, 4, 9, 16, 25, 2, 6, 12, 20, 30)]
    assert all(answer["headers"] == {SEQUENCE_ID: "<seq>"} for answer in ours["sequence"])


def test_jupyter_serve_answers_every_session_as_torchserve_0_12(
    ours: dict[str, list[dict[str, Any]]], theirs: dict[str, list[dict[str, Any]]]
) -> None:
    assert ours.keys() == theirs.keys()
    for name, transcript in ours.items():
        assert len(transcript) == len(theirs[name]), name
        for index, (mine, their) in enumerate(zip(transcript, theirs[name], strict=True)):
            expected = copy.deepcopy(their)
            if SEQUENCE_ID not in their["headers"] and mine["status"] < 400:
                expected["headers"][SEQUENCE_ID] = mine["headers"].get(SEQUENCE_ID)  # by design
            mine = without_cause(mine)
            assert mine == expected, f"{name}[{index}]: TorchServe {their}, ours {mine}"
