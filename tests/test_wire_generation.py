"""Reading a generation request: TorchServe-style bodies, OpenAI's fields, every refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jupyter_serve.wire.generation import (
    MAX_MESSAGES,
    GenerationRequest,
    RequestError,
    from_object,
    read_request,
)


def test_a_text_body_is_the_prompt_and_decoding_is_greedy() -> None:
    assert read_request({"body": bytearray(b"Once upon")}) == GenerationRequest(prompt="Once upon")
    assert read_request({"body": "Once"}).temperature == 0.0


def test_a_json_body_and_its_round_trip() -> None:
    body = {"messages": [{"role": "developer", "content": [{"type": "text", "text": "hi"}]}],
            "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": -1, "stop": "\n",
            "details": True}  # fmt: skip
    request = read_request({"body": body})
    assert request.messages == ({"role": "system", "content": "hi"},)
    assert (request.max_new_tokens, request.temperature, request.top_p) == (7, 0.5, 0.9)
    assert (request.seed, request.stop, request.details) == (2**63 - 1, ("\n",), True)
    raw = json.dumps(request.to_json()).encode()
    assert read_request({"body": bytearray(raw)}) == request


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "prompt"),
        ({"prompt": "a", "messages": []}, "prompt"),
        ({"prompt": 3}, "prompt"),
        ({"messages": []}, "messages"),
        ({"messages": ["hi"]}, "messages[0]"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": {"x": 1}}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": "x"}] * (MAX_MESSAGES + 1)}, "messages"),
        ({"prompt": "a", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "a", "max_new_tokens": True}, "max_new_tokens"),
        ({"prompt": "a", "temperature": 2.5}, "temperature"),
        ({"prompt": "a", "temperature": float("nan")}, "temperature"),
        ({"prompt": "a", "top_p": 0}, "top_p"),
        ({"prompt": "a", "seed": 1.5}, "seed"),
        ({"prompt": "a", "stop": ["x"] * 10_000}, "stop"),
        ({"prompt": "a", "stop": [""]}, "stop"),
        ({"prompt": "a", "stop": "x" * 257}, "stop"),
    ],
)
def test_refusals_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as refused:
        from_object(body)
    assert refused.value.param == param
    assert refused.value.to_json()["code"] == 400


@pytest.mark.parametrize("raw", [b"\xff\xfe", b'{"prompt": ', b'{"p": ' + b"[" * 100_000])
def test_undecodable_bodies_are_refused(raw: bytes) -> None:
    with pytest.raises(RequestError):
        read_request({"body": bytearray(raw)})
