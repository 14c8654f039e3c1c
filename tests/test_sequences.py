"""Sequence batching (server/sequences.py) with real workers: pinning, order, ids, limits, ends.

The handler keeps one running sum per sequence on its context (as TorchServe's
examples/stateful keep state) and answers the sum, its pid and its batch size; body `0`
ends the sequence (`ts_request_sequence_end`); `x-must-exist` makes an unknown sequence
an error, as the sequence_continuous_batching example's KeyError does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_serve.server.models import ModelSpec
from jupyter_serve.server.pool import WorkerPool
from jupyter_serve.server.sequences import (
    SEQUENCE_ID,
    SEQUENCE_START,
    SequenceBatcher,
    sequence_of,
)
from jupyter_serve.wire.errors import BadRequest, ServeError, ServiceUnavailable
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult, Parameter

HANG_GUARD = 60.0
REFUSED = (
    'Model "sums" has no worker to serve inference request. Please use scale workers API to '
    "add workers. If this is a sequence inference, please check if it is closed, or expired; "
    "or exceeds maxSequenceJobQueueSize"
)

SUMS = """
import os


def handle(data, context):
    if data is None:
        context.cache = {}
        return None
    out = []
    for idx, row in enumerate(data):
        sequence = context.get_sequence_id(idx)
        started = context.get_request_header(idx, context.header_key_sequence_start)
        if started:
            context.cache[sequence] = 0
        elif context.get_request_header(idx, "x-must-exist") and sequence not in context.cache:
            raise KeyError(sequence)
        value = int(bytes(row["body"]).decode())
        if value == -9:
            os._exit(3)
        if value == 0:
            context.set_response_header(idx, context.header_key_sequence_end, sequence)
        context.cache[sequence] = context.cache.get(sequence, 0) + value
        out.append({"sum": context.cache[sequence], "pid": os.getpid(), "batch": len(data),
                    "started": bool(started)})
    return out
"""


def sums_spec(folder: Path, **changes: Any) -> ModelSpec:
    folder.mkdir(exist_ok=True)
    (folder / "handler.py").write_text(SUMS)
    fields: dict[str, Any] = {
        "model_name": "sums", "version": "1.0", "model_dir": str(folder),
        "handler": "handler:handle", "manifest": {}, "batch_size": 4, "max_batch_delay": 0.0,
        "response_timeout": 30.0, "min_workers": 2, "max_workers": 2, "sequence_batching": True,
        "sequence_max_idle_ms": 5000, "max_sequence_job_queue_size": 10, "max_num_sequence": 4,
    }  # fmt: skip
    return ModelSpec(**{**fields, **changes})


class Client:
    """Sends requests to a pool with sequence batching, as the HTTP routes would."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.count = 0

    def send(self, body: str, sequence: str | None = None, **headers: str) -> Any:
        if sequence is not None:
            headers[SEQUENCE_ID] = sequence
        self.count += 1
        request = InferenceRequest(
            f"r{self.count}", headers, (Parameter("body", "", body.encode()),)
        )
        deadline = asyncio.get_running_loop().time() + HANG_GUARD
        return self.pool.batcher.submit(request, deadline)

    async def ask(self, body: str, sequence: str | None = None, **headers: str) -> Any:
        result: InferenceResult = await self.send(body, sequence, **headers)
        return {**json.loads(result.body), "id": result.headers.get(SEQUENCE_ID)}


async def serving(spec: ModelSpec, workers: int = 2) -> WorkerPool:
    pool = WorkerPool(spec, SequenceBatcher(spec), gpu_count=lambda: 0, backoff=(60,))
    assert (await pool.scale(workers)).ok
    return pool


def run(scenario: Callable[[Client], Any], spec: ModelSpec, workers: int = 2) -> Any:
    async def main() -> Any:
        pool = await serving(spec, workers)
        try:
            return await scenario(Client(pool))
        finally:
            await pool.stop()

    return asyncio.run(asyncio.wait_for(main(), HANG_GUARD))


def test_interleaved_sequences_each_run_in_order_on_their_own_worker(tmp_path: Path) -> None:
    """TorchServe's sequence_batching test: two clients, each sending its sequence's
    requests one after the other, get their own running sums, each from one worker."""

    async def scenario(client: Client) -> list[list[dict[str, Any]]]:
        async def session(sequence: str, bodies: list[int]) -> list[dict[str, Any]]:
            return [await client.ask(str(body), sequence) for body in bodies]

        return list(await asyncio.gather(session("seq_0", [1, 3, 5, 7, 9]),
                                         session("seq_1", [2, 4, 6, 8, 10])))  # fmt: skip

    first, second = run(scenario, sums_spec(tmp_path / "m"))
    assert [a["sum"] for a in first] == [1, 4, 9, 16, 25]
    assert [a["sum"] for a in second] == [2, 6, 12, 20, 30]
    assert len({a["pid"] for a in first}) == len({a["pid"] for a in second}) == 1
    assert first[0]["pid"] != second[0]["pid"]  # new sequences go to the workers in turn
    assert {a["id"] for a in first} == {"seq_0"}  # every answer names its sequence


def test_a_request_without_an_id_starts_a_sequence_the_answer_names(tmp_path: Path) -> None:
    async def scenario(client: Client) -> list[dict[str, Any]]:
        first = await client.ask("2")
        return [first, await client.ask("4", first["id"], **{"x-must-exist": "1"})]

    first, second = run(scenario, sums_spec(tmp_path / "m"))
    assert first["started"] is True
    assert first["id"].startswith("ts-seq-")
    assert len(first["id"]) == len("ts-seq-") + 36
    assert (second["sum"], second["id"], second["started"]) == (6, first["id"], False)
    assert second["pid"] == first["pid"]


def test_a_sequence_s_requests_run_one_at_a_time_batched_with_other_sequences(
    tmp_path: Path,
) -> None:
    """Five requests of one sequence queued at once run in five calls, in order; requests
    of four sequences on one worker share calls."""

    async def scenario(client: Client) -> tuple[list[Any], list[Any]]:
        same = await asyncio.gather(*(client.send(str(n), "solo") for n in (1, 2, 3, 4, 5)))
        mixed = await asyncio.gather(*(client.send("1", f"s{n}") for n in range(3)))
        return [json.loads(r.body) for r in same], [json.loads(r.body) for r in mixed]

    same, mixed = run(scenario, sums_spec(tmp_path / "m"), workers=1)
    assert [a["sum"] for a in same] == [1, 3, 6, 10, 15]
    assert {a["batch"] for a in same} == {1}
    assert max(a["batch"] for a in mixed) > 1


def test_a_full_sequence_queue_and_too_many_sequences_get_torchserve_s_503(
    tmp_path: Path,
) -> None:
    async def scenario(client: Client) -> list[BaseException | None]:
        futures = [client.send(str(n), "busy") for n in (1, 2)]  # queued: none taken yet
        outcomes: list[BaseException | None] = []
        for attempt in (lambda: client.send("1", "busy"), lambda: client.send("1", "other")):
            try:
                futures.append(attempt())
                outcomes.append(None)
            except ServeError as error:
                outcomes.append(error)
        await asyncio.gather(*futures)
        return outcomes

    spec = sums_spec(tmp_path / "m", max_sequence_job_queue_size=2, max_num_sequence=1)
    full, too_many = run(scenario, spec, workers=1)
    for error in (full, too_many):
        assert isinstance(error, ServiceUnavailable)
        assert error.message == REFUSED


def test_the_handler_ends_a_sequence_and_frees_its_place(tmp_path: Path) -> None:
    async def scenario(client: Client) -> list[dict[str, Any]]:
        first = await client.ask("5", "one")
        ended = await client.ask("0", "one")  # the handler answers ts_request_sequence_end
        other = await client.ask("7", "two")  # room again under maxNumSequence 1
        await client.ask("0", "two")
        again = await client.ask("1", "one")  # a new sequence under the old id
        return [first, ended, other, again]

    spec = sums_spec(tmp_path / "m", max_num_sequence=1)
    first, ended, other, again = run(scenario, spec, workers=1)
    assert (first["sum"], ended["sum"], other["sum"]) == (5, 5, 7)
    assert (again["id"], again["started"]) == ("one", False)  # a client-named id: no start


def test_an_idle_sequence_ends_and_its_id_then_starts_anew_on_the_next_worker(
    tmp_path: Path,
) -> None:
    """TorchServe's idle-timeout test: past sequenceMaxIdleMSec the sequence is gone; the
    same id opens a new sequence (no start header) on the worker whose turn it is, which
    does not know it: the handler's error is the client's 503."""

    async def scenario(client: Client) -> tuple[BaseException | None, int]:
        first = await client.ask("2")
        await asyncio.sleep(1.0)  # five times the idle time: the timer has long fired
        batcher = client.pool.batcher
        assert isinstance(batcher, SequenceBatcher)
        left = len(batcher.sequences)
        later = client.send("2", first["id"], **{"x-must-exist": "1"})
        await asyncio.wait([later])
        return later.exception(), left

    error, left = run(scenario, sums_spec(tmp_path / "m", sequence_max_idle_ms=200))
    assert left == 0
    assert isinstance(error, ServeError)
    assert error.status_code == 503


def test_a_worker_that_dies_ends_its_sequences_and_nothing_waits(tmp_path: Path) -> None:
    """The request in the dying worker gets "Worker died."; the one queued behind it in
    the same sequence gets 503 (the sequence's state died with the worker)."""

    async def scenario(client: Client) -> tuple[list[BaseException | None], int]:
        await client.ask("5", "doomed")
        dying, behind = client.send("-9", "doomed"), client.send("3", "doomed")
        await asyncio.wait([dying, behind])
        batcher = client.pool.batcher
        assert isinstance(batcher, SequenceBatcher)
        return [dying.exception(), behind.exception()], len(batcher.sequences)

    (died, refused), left = run(scenario, sums_spec(tmp_path / "m"), workers=1)
    assert isinstance(died, ServeError)
    assert (died.status_code, died.message) == (500, "Worker died.")
    assert isinstance(refused, ServiceUnavailable)
    assert refused.message == REFUSED
    assert left == 0


@pytest.mark.parametrize("sequence", ["x" * 129, "bad\x01id", "tab\tid"])
def test_a_bad_sequence_id_is_a_400(tmp_path: Path, sequence: str) -> None:
    async def scenario(client: Client) -> BaseException | None:
        try:
            client.send("1", sequence)
        except BadRequest as error:
            return error
        return None

    error = run(scenario, sums_spec(tmp_path / "m"), workers=1)
    assert isinstance(error, BadRequest)
    assert error.status_code == 400


def test_the_sequence_headers_the_handler_sees() -> None:
    """A named sequence keeps its id (whatever the header's case) and gets no start header;
    a new one gets its issued id and `ts_request_sequence_start: true`."""
    request, named = sequence_of(InferenceRequest("x", {"TS_REQUEST_SEQUENCE_ID": "abc"}))
    assert (named, request.headers) == ("abc", {SEQUENCE_ID: "abc"})
    request, named = sequence_of(InferenceRequest("x", {SEQUENCE_ID: ""}))
    assert request.headers == {SEQUENCE_START: "true", SEQUENCE_ID: named}
    assert named.startswith("ts-seq-")
