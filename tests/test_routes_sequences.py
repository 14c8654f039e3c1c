"""Sequence batching over HTTP (server/sequences.py behind the routes): every route that
predicts names the sequence alike, bad ids are TorchServe-shaped 400s, refusals name the
version the request named, and a plain model passes the header to its handler untouched.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from raw_http import connected
from route_models import register, server_config
from tornado.httpclient import HTTPClientError, HTTPResponse

Fetch = Callable[..., Awaitable[HTTPResponse]]

SEEN = """
def handle(data, context):
    if data is None:
        return None
    return [{"sequence": context.get_sequence_id(idx),
             "start": context.get_request_header(idx, context.header_key_sequence_start)}
            for idx in range(len(data))]
"""
SEQUENCES = "sequenceBatching: true\nsequenceMaxIdleMSec: 60000\nmaxNumSequence: 1\n"
SEQUENCE_ID = "ts_request_sequence_id"


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


async def predict(fetch: Fetch, *path: str, sequence: str | None = None,
                  body: bytes = b"{}") -> HTTPResponse:  # fmt: skip
    headers = {"Content-Type": "application/json"}
    if sequence is not None:
        headers[SEQUENCE_ID] = sequence
    return await fetch("serve", *path, method="POST", body=body, headers=headers)


async def test_every_predicting_route_names_the_sequence(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    """TorchServe's predictions, explanations and KServe routes share one sequence."""
    await register(jp_serverapp, "seq", source=SEEN, model_config=SEQUENCES)
    started = await predict(jp_fetch, "predictions", "seq")
    sequence = started.headers[SEQUENCE_ID]
    assert json.loads(started.body) == {"sequence": sequence, "start": "true"}
    explained = await predict(jp_fetch, "explanations", "seq", sequence=sequence)
    assert json.loads(explained.body) == {"sequence": sequence, "start": None}
    v1 = await predict(jp_fetch, "v1", "models", "seq:predict", sequence=sequence,
                       body=b'{"instances": [1]}')  # fmt: skip
    assert v1.headers[SEQUENCE_ID] == sequence
    assert json.loads(v1.body)["predictions"] == [{"sequence": sequence, "start": None}]


async def test_the_lane_names_the_sequence_as_the_full_route(
    jp_serverapp: Any, http_server: Any, jp_http_port: int
) -> None:
    await register(jp_serverapp, "seq", source=SEEN, model_config=SEQUENCES)
    token = jp_serverapp.identity_provider.token
    head = (f"POST {jp_serverapp.base_url}serve/predictions/seq HTTP/1.1\r\nHost: localhost\r\n"
            f"Authorization: token {token}\r\nContent-Type: application/json\r\n"
            "ts_request_sequence_id: mine\r\nContent-Length: 2\r\n\r\n{}")  # fmt: skip
    async with connected(jp_http_port) as raw:
        raw.send(head.encode())
        status, headers, body = await raw.response()
    assert (status, headers[SEQUENCE_ID]) == (200, "mine")
    assert json.loads(body) == {"sequence": "mine", "start": None}


@pytest.mark.parametrize("sequence", ["x" * 129, "a\x85b"])
async def test_a_bad_sequence_id_is_a_400(
    jp_fetch: Fetch, jp_serverapp: Any, sequence: str
) -> None:
    await register(jp_serverapp, "seq", source=SEEN, model_config=SEQUENCES)
    with pytest.raises(HTTPClientError) as caught:
        await predict(jp_fetch, "predictions", "seq", sequence=sequence)
    assert caught.value.code == 400
    assert caught.value.response is not None
    error = json.loads(caught.value.response.body)
    assert (error["code"], error["type"]) == (400, "BadRequestException")


async def test_one_sequence_too_many_names_the_version_as_torchserve(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp, "seq", source=SEEN, model_config=SEQUENCES)
    await predict(jp_fetch, "predictions", "seq", "1.0", sequence="first")
    with pytest.raises(HTTPClientError) as caught:
        await predict(jp_fetch, "predictions", "seq", "1.0", sequence="second")
    assert caught.value.code == 503
    assert caught.value.response is not None
    message = json.loads(caught.value.response.body)["message"]
    assert message.startswith('Model "seq" Version 1.0" has no worker to serve inference')


async def test_a_plain_model_passes_the_header_to_its_handler(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    """Without sequence batching the header is the client's, as any other (TorchServe)."""
    await register(jp_serverapp, "plain", source=SEEN)
    answer = await predict(jp_fetch, "predictions", "plain", sequence="theirs")
    assert json.loads(answer.body) == {"sequence": "theirs", "start": None}
    assert SEQUENCE_ID not in answer.headers
