"""A "steps" run in a real worker process (jupyter_serve/worker/steps.py), driven over its
socket as server/pool/continuous.py drives it: steps follow one another with no frame from
the server, a join and a leave land between two steps, "end" closes the run, a failed step
waits for "end", and controls that come after a run are ignored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from worker_harness import WorkerProcess, request, write_model

from jupyter_serve.wire.protocol import (
    Frame,
    InferenceRequest,
    InferenceResult,
    Kind,
    decode_results,
    encode_infer,
    read_frame_sync,
    write_frame_sync,
)

# Each call: one step of every request, answered "{id} {steps left} {ids in this call}";
# a request goes on while it has steps left (ts_stream_next from stopping_criteria).
STEPS = """
import time

def handle(data, context):
    if data is None:
        context.cache = {}
        return None
    ids = ",".join(sorted(context.request_ids.values()))
    if context.cache.get("slow") in context.request_ids.values():
        time.sleep(0.05)  # a slow request's steps: what the server sends lands meanwhile
    outputs, criteria = [], []
    for idx, row in enumerate(data):
        request_id = context.get_request_id(idx)
        if row:
            text = bytes(row["body"]).decode()
            if text == "boom":
                raise RuntimeError("boom")
            context.cache[request_id] = int(text.split()[-1])
            if text.startswith("slow"):
                context.cache["slow"] = request_id
        context.cache[request_id] -= 1
        outputs.append(f"{request_id} {context.cache[request_id]} {ids}")
        criteria.append(lambda _item, rid=request_id: context.cache[rid] <= 0)
    context.stopping_criteria = criteria
    return outputs
"""


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[WorkerProcess]:
    folder = write_model(tmp_path / "steps", {"handler.py": STEPS}, handler="handler:handle")
    with WorkerProcess() as process:
        loaded = process.load(folder, "handler:handle")
        assert loaded.header["status"] == 200, process.errors()
        yield process


def send(
    worker: WorkerProcess, command: str, *requests: InferenceRequest, capacity: int = 8
) -> None:
    frame = encode_infer(list(requests), command)
    header = {**frame.header, "capacity": capacity} if command == "steps" else frame.header
    write_frame_sync(worker.sock, Frame(frame.kind, header, frame.payload))


def receive(worker: WorkerProcess) -> Frame:
    frame = read_frame_sync(worker.sock)
    assert frame is not None, worker.errors()
    return frame


def step(worker: WorkerProcess) -> list[InferenceResult]:
    """The next step's answers (a T frame)."""
    frame = receive(worker)
    assert frame.kind is Kind.STEP, frame.header
    return decode_results(frame)


def bodies(results: list[InferenceResult]) -> list[str]:
    return [result.body.decode() for result in results]


def test_steps_follow_each_other_until_nothing_goes_on_then_end_closes_the_run(
    worker: WorkerProcess,
) -> None:
    send(worker, "steps", request("a", "3"), request("b", "1"))
    first = step(worker)
    assert bodies(first) == ["a 2 a,b", "b 0 a,b"]
    assert [r.headers["ts_stream_next"] for r in first] == ["true", "false"]
    # no frame from us: the worker went on with "a" alone, by id
    assert bodies(step(worker)) == ["a 1 a"]
    assert bodies(step(worker)) == ["a 0 a"]
    send(worker, "end")
    closing = receive(worker)
    assert closing.kind is Kind.RESULT
    assert decode_results(closing) == []
    assert worker.results(request("after", "1"))[0].body == b"after 0 after"


def test_a_join_and_a_leave_land_between_two_steps(worker: WorkerProcess) -> None:
    send(worker, "steps", request("a", "50"), request("b", "50"))
    assert bodies(step(worker)) == ["a 49 a,b", "b 49 a,b"]
    send(worker, "leave", InferenceRequest("b", {}))
    send(worker, "join", request("c", "50"))
    seen: list[str] = []
    while "a,c" not in seen:  # each lands before a later step: "b" then gone, "c" in
        results = step(worker)
        seen.append(bodies(results)[0].split()[2])
    assert set(seen[:-1]) <= {"a,b", "a"}
    lefts = [int(body.split()[1]) for body in bodies(results)]
    assert lefts == [49 - len(seen), 49]  # "a" went on, "c" took its first step


def test_with_nothing_going_on_the_worker_waits_for_a_join_or_the_end(
    worker: WorkerProcess,
) -> None:
    send(worker, "steps", request("a", "1"))
    assert bodies(step(worker)) == ["a 0 a"]
    send(worker, "leave", InferenceRequest("a", {}))  # late: "a" ended already
    send(worker, "join", request("b", "2"))
    assert bodies(step(worker)) == ["b 1 b"]
    assert bodies(step(worker)) == ["b 0 b"]
    send(worker, "end")
    assert receive(worker).kind is Kind.RESULT


def test_a_failed_step_is_a_step_with_the_error_and_the_run_waits_for_end(
    worker: WorkerProcess,
) -> None:
    send(worker, "steps", request("a", "5"))
    assert bodies(step(worker)) == ["a 4 a"]
    send(worker, "join", request("bad", "boom"))
    failed = None
    while failed is None:
        frame = receive(worker)
        assert frame.kind is Kind.STEP
        failed = frame.header.get("error")
    assert failed["status"] == 503
    assert failed["message"] == "Prediction failed"  # TorchServe's, the traceback apart
    assert "boom" in failed["traceback"]
    send(worker, "join", request("late", "1"))  # sent before we knew: ignored
    send(worker, "end")
    closing = receive(worker)
    assert closing.kind is Kind.RESULT
    assert decode_results(closing) == []
    send(worker, "end")  # a control after its run: no answer
    assert worker.results(request("next", "1"))[0].body == b"next 0 next"


def test_the_worker_exits_cleanly_when_the_server_closes_during_a_run(
    worker: WorkerProcess,
) -> None:
    send(worker, "steps", request("a", "1"))
    assert bodies(step(worker)) == ["a 0 a"]
    assert worker.close() == 0


def test_joins_past_the_capacity_wait_in_the_worker_for_the_next_free_place(
    worker: WorkerProcess,
) -> None:
    """c and d join a full run of two (capacity 2): they wait in the worker, and each takes
    a place at the very step after one frees (each step is slow enough for the joins to
    land long before b ends)."""
    send(worker, "steps", request("a", "40"), request("b", "slow 12"), capacity=2)
    assert bodies(step(worker)) == ["a 39 a,b", "b 11 a,b"]
    send(worker, "join", request("c", "2"), request("d", "40"))  # no place: both wait
    steps = [bodies(step(worker)) for _ in range(14)]
    assert all(len(answers) == 2 for answers in steps)  # never more than the capacity
    assert steps[10] == ["a 28 a,b", "b 0 a,b"]  # b's place frees...
    assert steps[11] == ["a 27 a,c", "c 1 a,c"]  # ...c takes it at once
    assert steps[12] == ["a 26 a,c", "c 0 a,c"]
    assert steps[13] == ["a 25 a,d", "d 39 a,d"]  # and d c's
