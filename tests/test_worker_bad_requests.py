"""Issue 13 end to end: requests that once killed the worker, batched with good ones.

A served model (real worker subprocess, the probe handler of `route_models`) gets
one batch of four: JSON nested past the recursion limit, a body whose charset is
``zlib`` (no text encoding), and two good requests. The nested one gets its own
400, the others their answers from one handler call, and the worker is the same
process afterwards.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from route_models import register, server_config
from tornado.httpclient import HTTPResponse

Fetch = Callable[..., Awaitable[HTTPResponse]]
BATCH = 4
NESTED = b"[" * 100_000


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path, batch_policy="strict")  # TorchServe's: wait for a full batch


async def predict(fetch: Fetch, body: bytes, content_type: str, mode: str = "") -> HTTPResponse:
    headers = {"Content-Type": content_type, **({"X-Mode": mode} if mode else {})}
    return await fetch(
        "serve", "predictions", "probe", method="POST", body=body, headers=headers,
        raise_error=False,
    )  # fmt: skip


async def worker_pids(fetch: Fetch) -> list[int]:
    response = await fetch("serve", "models", "probe")
    [model] = json.loads(response.body)
    return [worker["pid"] for worker in model["workers"]]


async def test_bad_requests_get_400s_and_the_rest_of_their_batch_is_served_by_the_same_worker(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    # A strict batch leaves when full (or after 20 s): the four requests below are one batch.
    await register(jp_serverapp, batch_size=BATCH, max_batch_delay_ms=20_000)
    pids = await worker_pids(jp_fetch)
    squeezed = zlib.compress(b"hello")
    nested, zipped, first, second = await asyncio.gather(
        predict(jp_fetch, NESTED, "application/json"),
        predict(jp_fetch, squeezed, "text/plain; charset=zlib"),
        predict(jp_fetch, b'{"n": 1}', "application/json", "seen"),
        predict(jp_fetch, b'{"n": 2}', "application/json; charset=utf-8", "seen"),
    )
    assert nested.code == 400
    assert nested.headers["Content-Type"] == "application/json"
    assert json.loads(nested.body) == {
        "code": 400,
        "type": "BadRequestException",
        "message": "JSON nests too deeply (input 'body')",
    }
    assert (zipped.code, zipped.body) == (200, squeezed)  # no text encoding: the raw bytes
    seen = [json.loads(response.body) for response in (first, second)]
    assert [s["row"] for s in seen] == [{"body": {"n": 1}}, {"body": {"n": 2}}]
    assert [s["batch"] for s in seen] == [BATCH - 1] * 2  # one handler call, without the 400
    assert await worker_pids(jp_fetch) == pids
