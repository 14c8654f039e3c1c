"""Continuous batching over HTTP: a model whose model-config.yaml says `continuousBatching:
true`, described as TorchServe describes it, streaming one chunk per step on the full
route and on the serve lane alike (TorchServe's chunked answer, `ts_stream_next` and all).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from raw_http import connected
from route_models import register, server_config

COUNTDOWN = """
def handle(data, context):
    if data is None:
        context.cache = {}
        return None
    outputs, criteria = [], []
    for idx, row in enumerate(data):
        request_id = context.get_request_id(idx)
        if row:
            context.cache[request_id] = int(bytes(row["body"]).decode())
        context.cache[request_id] -= 1
        outputs.append(f"{context.cache[request_id]};")
        criteria.append(lambda item, rid=request_id: context.cache[rid] <= 0)
    context.stopping_criteria = criteria
    return outputs
"""
CONFIG = "continuousBatching: true\nbatchSize: 4\nmaxBatchDelay: 0\n"


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


async def test_describe_reports_continuous_batching(jp_fetch: Any, jp_serverapp: Any) -> None:
    await register(jp_serverapp, "countdown", source=COUNTDOWN, model_config=CONFIG)
    answer = await jp_fetch("serve", "models", "countdown", method="GET")
    described = json.loads(answer.body)[0]
    assert described["continuousBatching"] is True
    assert described["batchSize"] == 4
    assert (described["stateful"], described["sequenceMaxIdleMSec"]) == (False, 0)


async def test_each_step_is_one_chunk_on_the_full_route_and_on_the_lane(
    jp_fetch: Any, jp_serverapp: Any, jp_http_port: int
) -> None:
    await register(jp_serverapp, "countdown", source=COUNTDOWN, model_config=CONFIG)
    octets = {"Content-Type": "application/octet-stream"}
    full = await jp_fetch("serve", "predictions", "countdown", method="POST", body=b"3",
                          headers=octets)  # fmt: skip
    assert full.code == 200
    assert full.body == b"2;1;0;"
    assert full.headers["Transfer-Encoding"] == "chunked"
    assert full.headers["ts_stream_next"] == "true"  # the first step's, as TorchServe sends
    token = jp_serverapp.identity_provider.token
    async with connected(jp_http_port) as raw:
        head = (f"POST {jp_serverapp.base_url}serve/predictions/countdown HTTP/1.1\r\n"
                f"Host: localhost\r\nAuthorization: token {token}\r\n"
                "Content-Length: 1\r\n\r\n")  # fmt: skip
        raw.send(head.encode() + b"3")
        status, headers, body = await raw.response()
        raw.send(head.encode() + b"1")  # the same connection goes on: a plain answer
        plain = await raw.response()
    assert (status, body, headers["transfer-encoding"]) == (200, b"2;1;0;", "chunked")
    assert headers["ts_stream_next"] == "true"
    assert (plain[0], plain[2], plain[1].get("ts_stream_next")) == (200, b"0;", "false")
