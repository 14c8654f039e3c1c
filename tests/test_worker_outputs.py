"""Handler output into results: TorchServe's encoding and the context's per-request state."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jupyter_serve.wire.protocol import InferenceResult
from jupyter_serve.worker.context import Context
from jupyter_serve.worker.outputs import (
    NOT_A_LIST,
    UNSUPPORTED,
    WRONG_LENGTH,
    InvalidOutput,
    build_results,
    encode_output,
)


def context(size: int) -> Context:
    ctx = Context("m", "/d", {}, size, None, "")
    return ctx.with_requests([f"id{i}" for i in range(size)], [{}] * size)


@pytest.mark.parametrize(
    ("item", "body"),
    [
        (b"\x00raw", b"\x00raw"),
        (bytearray(b"ba"), b"ba"),
        (memoryview(b"mv"), b"mv"),
        ("t\u00eaxt", "t\u00eaxt".encode()),
        ("echo \ud800!", b"echo \\ud800!"),  # a lone surrogate, as a client's JSON can send
        ({"b": 1, "a": [1.5]}, json.dumps({"b": 1, "a": [1.5]}, indent=2).encode()),
        (3, b"3"),
        (None, b"null"),
    ],
)
def test_encode_output(item: Any, body: bytes) -> None:
    assert encode_output(item) == body


def test_unencodable_item_names_its_index() -> None:
    with pytest.raises(InvalidOutput) as info:
        encode_output({1, 2}, idx=4)
    assert info.value.message == UNSUPPORTED
    assert "output item 4" in info.value.detail


def test_results_take_status_type_and_headers_from_the_context() -> None:
    ctx = context(2)
    ctx.set_response_status(206, "Partial", 1)
    ctx.set_response_content_type(1, "application/x-npy")
    ctx.set_response_header(1, "X-Shape", "2,2")
    assert build_results(["a", b"b"], ctx) == [
        InferenceResult("id0", 200, b"a", None, "", {}),
        InferenceResult("id1", 206, b"b", "application/x-npy", "Partial", {"X-Shape": "2,2"}),
    ]


@pytest.mark.parametrize(
    ("outputs", "message"),
    [(("a", "b"), NOT_A_LIST), ({"a": 1}, NOT_A_LIST), (["a"], WRONG_LENGTH), ([], WRONG_LENGTH)],
)
def test_output_must_be_a_list_of_one_item_per_request(outputs: Any, message: str) -> None:
    with pytest.raises(InvalidOutput) as info:
        build_results(outputs, context(2))
    assert info.value.message == message
