"""Reading a generation request: TorchServe-style bodies, OpenAI's fields, every refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jupyter_serve.wire.generation import (
    MAX_LOGIT_BIAS,
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
            "details": True, "frequency_penalty": -2, "presence_penalty": 0.5,
            "logit_bias": {"12": 100, "3": -1.5}}  # fmt: skip
    request = read_request({"body": body})
    assert request.messages == ({"role": "system", "content": "hi"},)
    assert (request.max_new_tokens, request.temperature, request.top_p) == (7, 0.5, 0.9)
    assert (request.seed, request.stop, request.details) == (2**63 - 1, ("\n",), True)
    assert (request.frequency_penalty, request.presence_penalty) == (-2.0, 0.5)
    assert request.logit_bias == ((3, -1.5), (12, 100.0))
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
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        (
            {"messages": [{"role": "assistant"}, {"role": "system", "content": None}]},
            "messages[1].content",
        ),
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
        ({"prompt": "a", "frequency_penalty": 2.5}, "frequency_penalty"),
        ({"prompt": "a", "frequency_penalty": "1"}, "frequency_penalty"),
        ({"prompt": "a", "presence_penalty": -2.01}, "presence_penalty"),
        ({"prompt": "a", "presence_penalty": float("inf")}, "presence_penalty"),
        ({"prompt": "a", "logit_bias": [[1, 2]]}, "logit_bias"),
        ({"prompt": "a", "logit_bias": {"abc": 1}}, "logit_bias"),
        ({"prompt": "a", "logit_bias": {"-1": 1}}, "logit_bias"),
        ({"prompt": "a", "logit_bias": {"1": 100.5}}, "logit_bias"),
        ({"prompt": "a", "logit_bias": {"1": True}}, "logit_bias"),
        ({"prompt": "a", "logit_bias": {"1": float("nan")}}, "logit_bias"),
        (
            {"prompt": "a", "logit_bias": {str(i): 1 for i in range(MAX_LOGIT_BIAS + 1)}},
            "logit_bias",
        ),
        # found by an attack audit: each was a 500 or a 503 with a traceback
        ({"prompt": "a", "temperature": 10**400}, "temperature"),
        ({"prompt": "a", "top_p": -(10**400)}, "top_p"),
        ({"prompt": "a\ud800"}, "prompt"),
        ({"messages": [{"role": "user", "content": "\udfff"}]}, "messages[0].content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "\ud800"}]}]},
            "messages[0].content",
        ),
        ({"prompt": "a", "stop": ["\ud800"]}, "stop"),
    ],
)
def test_refusals_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as refused:
        from_object(body)
    assert refused.value.param == param
    assert refused.value.to_json()["code"] == 400


@pytest.mark.parametrize(
    "raw",
    [b"\xff\xfe", b'{"prompt": ', b'{"p": ' + b"[" * 100_000, b'{"prompt": "\\ud800"}',
     b'{"prompt": "x", "temperature": 1' + b"0" * 400 + b"}"],
)  # fmt: skip
def test_undecodable_bodies_are_refused(raw: bytes) -> None:
    with pytest.raises(RequestError):
        read_request({"body": bytearray(raw)})


def test_default_penalties_and_bias_change_nothing() -> None:
    body = {"prompt": "a", "frequency_penalty": 0, "presence_penalty": None, "logit_bias": {}}
    request = from_object(body)
    assert request == GenerationRequest(prompt="a")
    assert not request.adjusts_logits
    assert "logit_bias" not in request.to_json()


def test_only_an_assistant_message_may_come_without_content() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": []}]
    assert from_object({"messages": messages}).messages == (
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": ""},
    )  # fmt: skip
