"""TorchServe's streaming (`ts.handler_utils.utils.send_intermediate_predict_response`) in a
real worker: each call is one S frame before the batch's R, per request of the batch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from worker_harness import WorkerProcess, request, write_model

from jupyter_serve.wire.protocol import InferenceRequest, Kind, decode_results
from jupyter_serve.worker.context import Context
from jupyter_serve.worker.streaming import (
    StreamingUnavailable,
    send_intermediate_predict_response,
)

STREAMER = """
from ts.handler_utils.utils import send_intermediate_predict_response

LATE = []


def handle(data, context):
    if data is None:
        return None
    mode = context.get_request_header(0, "x-mode") or "stream"
    if mode == "plain":
        return ["plain" for _ in data]
    if mode == "short":
        send_intermediate_predict_response(["one"], context.request_ids, "ok", 200, context)
    if mode == "refuse":
        ids = context.request_ids
        send_intermediate_predict_response(["x"] * len(data), ids, "no", 500, context)
    if mode == "late":
        return [repr(LATE)]
    if mode == "keep":
        LATE.append(context)
        return ["kept"]
    if LATE:  # a context kept from an earlier batch: the model's one context (TorchServe's)
        LATE.append(LATE.pop() is context)
    for idx in range(len(data)):
        context.set_response_content_type(idx, "text/plain")
    for _ in range(3):
        words = [f"hello{'' if i == 0 else i} " for i in range(len(data))]
        send_intermediate_predict_response(
            words, context.request_ids, "Intermediate Prediction success", 200, context
        )
    return ["world " for _ in data]
"""


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    folder = write_model(tmp_path_factory.mktemp("stream") / "echo_stream", {"s.py": STREAMER})
    with WorkerProcess() as process:
        assert process.load(folder, "s").kind is Kind.RESULT
        yield process


def test_each_intermediate_call_is_one_frame_per_request_before_the_result(
    worker: WorkerProcess,
) -> None:
    chunks, reply = worker.streamed(request("a"), request("b"))
    assert len(chunks) == 3
    assert all(c.status == 200 for c in chunks)
    assert chunks[0].message == "Intermediate Prediction success"
    for chunk in chunks:
        assert [(r.request_id, r.body) for r in chunk.results] == [
            ("a", b"hello "),
            ("b", b"hello1 "),
        ]
        assert all(r.content_type == "text/plain" for r in chunk.results)
        assert all(r.headers == {"ts_stream_next": "true"} for r in chunk.results)
    assert reply.kind is Kind.RESULT
    final = decode_results(reply)
    assert [(r.request_id, r.body) for r in final] == [("a", b"world "), ("b", b"world ")]
    assert b"".join(c.results[0].body for c in chunks) + final[0].body == (
        b"hello hello hello world "
    )


def test_a_handler_that_does_not_stream_answers_with_one_result(worker: WorkerProcess) -> None:
    chunks, reply = worker.streamed(request("p", headers={"x-mode": "plain"}))
    assert chunks == []
    assert reply.kind is Kind.RESULT
    assert decode_results(reply)[0].body == b"plain"


def test_a_chunk_missing_a_request_fails_the_batch_and_the_worker_serves_on(
    worker: WorkerProcess,
) -> None:
    chunks, reply = worker.streamed(request("a", headers={"x-mode": "short"}), request("b"))
    assert chunks == []
    assert reply.kind is Kind.ERROR
    assert (reply.header["status"], reply.header["message"]) == (
        503,
        "number of batch response mismatched",
    )
    assert "no item 1" in reply.header["traceback"]
    assert len(worker.streamed(request("c"))[0]) == 3


def test_a_non_200_code_travels_with_the_chunk(worker: WorkerProcess) -> None:
    chunks, reply = worker.streamed(request("a", headers={"x-mode": "refuse"}))
    assert [(c.status, c.message) for c in chunks[:1]] == [(500, "no")]
    assert reply.kind is Kind.RESULT


def test_every_batch_gets_the_model_s_one_context_as_in_torchserve(worker: WorkerProcess) -> None:
    worker.streamed(request("t", headers={"x-mode": "keep"}))
    chunks, _ = worker.streamed(request("s"))
    assert {r.request_id for c in chunks for r in c.results} == {"s"}
    _, reply = worker.streamed(request("l", headers={"x-mode": "late"}))
    assert decode_results(reply)[0].body == b"[True]"


def test_streaming_needs_a_context_serving_a_batch(tmp_path: Path) -> None:
    context = Context("m", str(tmp_path), {}, 1, None, "0.12.0").with_requests(["r"], [{}])
    with pytest.raises(StreamingUnavailable, match="from inside handle"):
        send_intermediate_predict_response(["x"], context.request_ids, "ok", 200, context)
    with pytest.raises(StreamingUnavailable):
        send_intermediate_predict_response(["x"], {0: "r"}, "ok", 200)


STEPPER = """
def handle(data, context):
    if data is None:
        context.cache = {}  # TorchServe's stateful handlers keep their state on the context
        return None
    outputs, criteria = [], []
    for idx, row in enumerate(data):
        request_id = context.get_request_id(idx)
        if row:  # a new request: its body is the number of steps it takes (0: a plain answer)
            context.cache[request_id] = int(row["body"])
        else:  # continuing (sent again without its body): one step done
            context.cache[request_id] -= 1
        tag = context.get_request_header(idx, "x-tag")
        outputs.append(f"{request_id}:{context.cache[request_id]}:{tag}")
        criteria.append(stopping(context.cache, request_id))
    context.stopping_criteria = criteria
    return outputs


def stopping(cache, request_id):
    def stop(item):
        left = cache[request_id]
        if left == 0:
            return None
        return left == 1
    return stop
"""


@pytest.fixture(scope="module")
def stepper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    folder = write_model(tmp_path_factory.mktemp("steps") / "stepper", {"s.py": STEPPER})
    with WorkerProcess() as process:
        assert process.load(folder, "s").kind is Kind.RESULT
        yield process


def continuing(request_id: str, tag: str) -> InferenceRequest:
    """A request continuous batching sends again: its id and headers, no body."""
    return InferenceRequest(request_id, {"x-tag": tag})


def test_stopping_criteria_set_ts_stream_next_and_the_context_keeps_state(
    stepper: WorkerProcess,
) -> None:
    """TorchServe's continuous-batching contract in the worker: per request, True from
    its criterion ends the answer ("false"), False continues it ("true"), None is a plain
    answer (no header); a continuing request comes back as an empty row with its headers."""
    a = request("a", b"2", headers={"x-tag": "A"})
    b = request("b", b"0", headers={"x-tag": "B"})
    _, reply = stepper.streamed(a, b)
    first = decode_results(reply)
    assert [(r.body, r.headers) for r in first] == [
        (b"a:2:A", {"ts_stream_next": "true"}),
        (b"b:0:B", {}),
    ]
    _, reply = stepper.streamed(continuing("a", "A"), request("c", b"1", headers={"x-tag": "C"}))
    second = decode_results(reply)
    assert [(r.body, r.headers) for r in second] == [
        (b"a:1:A", {"ts_stream_next": "false"}),
        (b"c:1:C", {"ts_stream_next": "false"}),
    ]
