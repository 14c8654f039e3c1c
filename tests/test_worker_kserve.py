"""Tests for the worker opening KServe requests the server forwarded (worker/kserve.py).

In-process: `expand` and `Forwarded.collect` on wire requests as the server sends
them, and `ModelService` with a real handler for the whole batch. Spies show that a
request breaking a rule is refused before anything is built for it.
"""

from __future__ import annotations

import gzip
import json
import struct
import tracemalloc
import zlib
from typing import Any

import pytest

from jupyter_serve.wire.errors import BadRequest, RequestTooLarge, no_worker_message
from jupyter_serve.wire.oip import BINARY_HEADER
from jupyter_serve.wire.protocol import KSERVE_HEADER, InferenceRequest, InferenceResult, Parameter
from jupyter_serve.worker import kserve_codec, kserve_tensors
from jupyter_serve.worker.kserve import expand, inflate

JSON = "application/json"


def forwarded(protocol: str, body: Any, room: int = 100, max_elements: int = 1000,
              **headers: str) -> InferenceRequest:  # fmt: skip
    """A KServe request as the server's route forwards it."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    how = {"protocol": protocol, "room": room, "max_elements": max_elements,
           "model": ["m", "2.0"]}  # fmt: skip
    return InferenceRequest("r1", {KSERVE_HEADER: json.dumps(how), "explain": "False", **headers},
                            (Parameter("body", JSON, raw),))  # fmt: skip


def v2(shape: list[int], data: list[Any], datatype: str = "FP32") -> dict[str, Any]:
    return {"inputs": [{"name": "x", "shape": shape, "datatype": datatype, "data": data}]}


def calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    seen: list[int] = []
    original = getattr(module, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        seen.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return seen


def test_v1_instances_become_rows_and_their_results_one_predictions_answer() -> None:
    batch = expand([forwarded("v1", {"instances": [{"a": 1}, 7]})])
    rows = [{p.name: json.loads(p.value) for p in r.parameters} for r in batch.requests]
    assert rows == [{"a": 1}, {"body": 7}]
    assert all(KSERVE_HEADER not in r.headers for r in batch.requests)  # the handler never sees it
    (answer,) = batch.collect(
        [InferenceResult("r1", body=b'"x"'), InferenceResult("r1", body=b"2")]
    )
    assert (answer.status, json.loads(answer.body)) == (200, {"predictions": ["x", 2]})


def test_a_failed_row_answers_for_its_whole_request() -> None:
    batch = expand([forwarded("v1", {"instances": [1, 2]})])
    failed = InferenceResult("r1", 507, b"no room", "text/plain")
    assert batch.collect([InferenceResult("r1", body=b"1"), failed]) == [failed]


def test_a_body_that_is_no_envelope_is_the_handlers_one_row_answered_as_is() -> None:
    plain = InferenceRequest("r0", {"A": "b"}, (Parameter("body", "", b"raw"),))
    batch = expand([plain, forwarded("v2", b"raw bytes")])
    assert [r.parameters[0].value for r in batch.requests] == [b"raw", b"raw bytes"]
    answers = [InferenceResult("r0", body=b"one"), InferenceResult("r1", body=b"two")]
    assert batch.collect(answers) == answers


def test_v2_answers_carry_the_model_and_binary_outputs_when_asked() -> None:
    request = {**v2([2], [1.5, 2.5]), "id": "q", "parameters": {"binary_data_output": True}}
    batch = expand([forwarded("v2", request)])
    (answer,) = batch.collect([InferenceResult("r1", body=b"[1.0, 2.0]")])
    length = int(answer.headers[BINARY_HEADER])
    header = json.loads(answer.body[:length])
    assert (header["id"], header["model_name"], header["model_version"]) == ("q", "m", "2.0")
    assert struct.unpack("<2d", answer.body[length:]) == (1.0, 2.0)


def test_a_shape_that_describes_no_data_is_refused_before_anything_is_shaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shaped = calls(monkeypatch, kserve_tensors, "tensor_json")
    batch = expand([forwarded("v2", v2([4_000_000, 0], []))])
    (answer,) = batch.collect([])
    assert (answer.status, batch.requests, shaped) == (400, [], [])


def test_tensors_past_the_cap_are_refused_before_their_binary_data_is_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decoded = calls(monkeypatch, kserve_tensors, "read_elements")
    inputs = [{"name": "b", "shape": [1001], "datatype": "BOOL",
               "parameters": {"binary_data_size": 1001}}]  # fmt: skip
    header = json.dumps({"inputs": inputs}).encode()
    request = forwarded("v2", header + bytes(1001), **{BINARY_HEADER: str(len(header))})
    (answer,) = expand([request]).collect([])
    assert (answer.status, json.loads(answer.body)["type"]) == (
        413,
        "RequestEntityTooLargeException",
    )
    assert decoded == []


def test_more_items_than_the_queue_takes_are_refused_before_one_row_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = calls(monkeypatch, kserve_codec, "item_parameters")
    batch = expand([forwarded("v1", {"instances": list(range(6))}, room=5)])
    (answer,) = batch.collect([])
    assert (answer.status, json.loads(answer.body)["message"]) == (503, no_worker_message("m"))
    assert built == []


def test_a_refused_request_leaves_the_others_of_its_batch_to_the_handler() -> None:
    good = InferenceRequest("r0", {}, (Parameter("body", "", b"ok"),))
    batch = expand([forwarded("v1", {"instances": 3}), good, forwarded("v2", b'{"inputs": [')])
    assert [r.request_id for r in batch.requests] == ["r0", "r1"]  # the last: no envelope
    answers = batch.collect([InferenceResult("r0", body=b"fine"), InferenceResult("r1", body=b"!")])
    assert [a.status for a in answers] == [400, 200, 200]
    assert batch.answered


def test_a_malformed_server_header_is_that_requests_400() -> None:
    broken = InferenceRequest("r1", {KSERVE_HEADER: "{"}, (Parameter("body", JSON, b"{}"),))
    (answer,) = expand([broken]).collect([])
    assert answer.status == 400


@pytest.mark.parametrize(
    ("protocol", "body", "headers"),
    [
        ("v1", b'{"instances": []}', {}),
        ("v2", b'{"inputs": []}', {}),
        ("v2", b'{"inputs": []}', {BINARY_HEADER: "14"}),  # the binary extension's form
    ],
)
def test_an_envelope_without_items_is_a_400(
    protocol: str, body: bytes, headers: dict[str, str]
) -> None:
    batch = expand([forwarded(protocol, body, **headers)])
    (answer,) = batch.collect([])
    key = "instances" if protocol == "v1" else "inputs"
    assert (answer.status, batch.requests) == (400, [])
    assert (
        json.loads(answer.body)["message"] == f"The request has no {key}: its {key} list is empty."
    )


def test_only_the_requested_outputs_are_answered() -> None:
    request = {"inputs": v2([1], [1])["inputs"] + [{**v2([1], [2])["inputs"][0], "name": "y"}],
               "outputs": [{"name": "y", "parameters": {"binary_data": False}}]}  # fmt: skip
    batch = expand([forwarded("v2", request)])
    assert len(batch.requests) == 2  # every input still reaches the handler
    (answer,) = batch.collect(
        [InferenceResult("r1", body=b"[1]"), InferenceResult("r1", body=b"[2]")]
    )
    assert [(out["name"], out["data"]) for out in json.loads(answer.body)["outputs"]] == [
        ("y", [2])
    ]


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ([{"name": "zzz"}], "Unexpected inference output 'zzz' for model 'm'"),
        ({"name": "x"}, 'The "outputs" of the request must be a list'),
        ([{"name": "x"}, "y"], 'The "outputs" of the request must be a list'),
    ],
)
def test_a_requested_output_the_answer_lacks_is_refused_before_anything_is_decoded(
    monkeypatch: pytest.MonkeyPatch, outputs: Any, message: str
) -> None:
    built = calls(monkeypatch, kserve_codec, "input_row")
    batch = expand([forwarded("v2", {**v2([1], [1]), "outputs": outputs})])
    (answer,) = batch.collect([])
    assert (answer.status, batch.requests, built) == (400, [], [])
    assert json.loads(answer.body)["message"].startswith(message)


def test_a_compressed_body_is_opened_decompressed() -> None:
    body = json.dumps(v2([2], [1, 2], "INT64")).encode()
    for encoding, packed in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        batch = expand([forwarded("v2", packed, **{"Content-Encoding": encoding})])
        (answer,) = batch.collect([InferenceResult("r1", body=b"[2, 4]")])
        assert json.loads(answer.body)["outputs"][0]["data"] == [2, 4], encoding


def test_inflate_stops_at_its_limit_however_much_the_body_holds() -> None:
    bomb = gzip.compress(bytes(64 << 20))  # 64 MiB of zeros in about 64 KB
    tracemalloc.start()
    try:
        with pytest.raises(RequestTooLarge, match="exceeds the limit of 1000 bytes"):
            inflate(bomb, "gzip", 1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(bomb) + (1 << 20)  # never the 64 MiB (zlib's max_length)
    assert inflate(gzip.compress(b"x" * 1000), "x-gzip", 1000) == b"x" * 1000  # just fits
    assert inflate(gzip.compress(b"a") + gzip.compress(b"b"), "GZIP", 10) == b"ab"  # members
    assert inflate(b"as sent", "br", 10) == b"as sent"  # not ours to decode


@pytest.mark.parametrize(
    ("body", "encoding", "message"),
    [
        (b"not gzip at all", "gzip", "cannot be decompressed"),
        (gzip.compress(b"{}")[:-5], "gzip", "cut short"),
        (zlib.compress(b"{}") + b"junk", "deflate", "bytes after its end"),
        (b"", "deflate", "cut short"),
    ],
)
def test_a_body_that_is_no_such_stream_is_a_400(body: bytes, encoding: str, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        inflate(body, encoding, 1000)
