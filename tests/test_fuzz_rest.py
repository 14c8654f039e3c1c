"""A fuzz of the REST surface, driven by the server's own OpenAPI document (issue 13).

Hypothesis picks an operation of `GET serve/api-description` (every documented
path and verb), fills its path parameters with names good and hostile (unknown,
too long, percent-escapes, `..`, non-UTF-8), its documented query parameters with
junk (non-numbers, negatives, huge numbers, empty, unicode) and its body with junk
(random bytes, JSON nested past the recursion limit, envelopes of random values),
and sends it with the token to a real server serving a probe model. For client
input the server must answer without a 500 (a 503 or 507 only as TorchServe's
model-state answers), log nothing at ERROR level (no traceback, no dead worker),
and write no file outside its model store and work folder. Bounded: 150 examples.
Bodies of v2 `infer` requests are half the time v2 tensors with hostile shapes
(zero dimensions beside huge ones, more dimensions than data, negative or 2**63
sizes). Last, every documented operation is sent once more with bare LF line
endings on a raw connection: each must be answered, never left waiting.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jupyter_server.utils import url_path_join
from route_models import register, server_config

from jupyter_serve.server.http.openapi import api_description

NAMES = ["probe", "nope", "a" * 300, "%ff", "..", "%2e%2e", "pro be", "probe:x", "1.0", "-1",
         "\u00e9t\u00e9", "probe/1.0"]  # fmt: skip
JUNK = ["", "0", "-1", "1", "2", "abc", "1.5", "99999999999999999999999", "true", "\u2603",
        "../etc", "%00", "probe.mar", "file:///etc/passwd", "http://127.0.0.1:1/x.mar",
        "a" * 300 + ".mar", "/" + "b" * 300]  # fmt: skip
STATE_ANSWERS = {"ServiceUnavailableException"}  # 503: a model without a serving worker
NOT_IMPLEMENTED = 501  # TorchServe's answer to v2 versioned routes


def operations() -> list[tuple[str, str, list[str]]]:
    """(verb, path template, query parameter names) of every documented operation."""
    found = []
    for path, verbs in api_description()["paths"].items():
        for verb, operation in verbs.items():
            names = [p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"]
            found.append((verb.upper(), path, names))
    return found


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


BODIES = st.one_of(
    st.binary(max_size=64),
    st.just(nested(3000)),
    st.just(b'{"instances": ' + nested(5000) + b"}"),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                     st.sampled_from(["instances", "inputs", "data", "url", "shape", "name"]),
                     inner, max_size=3),
                 max_leaves=12).map(lambda value: json.dumps(value).encode()),
)  # fmt: skip


DIMS = st.sampled_from([0, 1, 2, 3, 4_000_000, 10**12, 2**63, -1])
V2_BODIES = st.builds(
    lambda shape, data, kind: json.dumps(
        {"inputs": [{"name": "x", "shape": shape, "datatype": kind, "data": data}]}
    ).encode(),
    st.lists(DIMS, max_size=6),
    st.lists(st.integers(0, 3), max_size=4) | st.lists(st.lists(st.integers(0, 3), max_size=2)),
    st.sampled_from(["FP32", "INT64", "BOOL", "BYTES"]),
)


@st.composite
def requests(draw: Callable[..., Any]) -> tuple[str, str, dict[str, str], bytes, str]:
    verb, template, names = draw(st.sampled_from(operations()))
    path = template
    while "{" in path:
        start, end = path.index("{"), path.index("}")
        value = draw(st.just("probe") | st.just("1.0") | st.sampled_from(NAMES))
        path = path[:start] + (value if "%" in value else quote(value, safe="")) + path[end + 1 :]
    query = {name: draw(st.sampled_from(JUNK)) for name in names if draw(st.booleans())}
    content_type = draw(st.sampled_from(["application/json", "application/octet-stream",
                                         "text/plain; charset=zlib", ""]))  # fmt: skip
    hostile_shape = "infer" in template and draw(st.booleans())
    return verb, path, query, draw(V2_BODIES if hostile_shape else BODIES), content_type


def files_outside(root: Path, allowed: list[Path]) -> set[Path]:
    return {
        path for path in root.rglob("*")
        if path.is_file() and not any(path.is_relative_to(folder) for folder in allowed)
    }  # fmt: skip


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path, max_workers_per_model=1, max_request_size=65536)


async def test_the_documented_api_answers_junk_without_a_500_a_traceback_or_a_stray_file(
    jp_serverapp: Any, http_server_client: Any, jp_base_url: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    await register(jp_serverapp)
    app = jp_serverapp.web_app.settings["serve_app"]
    allowed = [Path(app.model_store), Path(app.workdir)]
    before = files_outside(tmp_path, allowed)
    token = jp_serverapp.identity_provider.token
    loop = asyncio.get_running_loop()

    async def send(verb: str, path: str, query: dict[str, str], body: bytes,
                   content_type: str) -> tuple[int, bytes]:  # fmt: skip
        url = url_path_join(jp_base_url, "serve", path.lstrip("/"))
        if query:
            url += "?" + "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in query.items())
        response = await http_server_client.fetch(
            url, method=verb, body=body if verb in ("POST", "PUT") else None,
            headers={"Authorization": f"token {token}", "Content-Type": content_type},
            allow_nonstandard_methods=True, raise_error=False, request_timeout=60,
        )  # fmt: skip
        return response.code, response.body or b""

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(requests())
    def probe(request: tuple[str, str, dict[str, str], bytes, str]) -> None:
        status, body = asyncio.run_coroutine_threadsafe(send(*request), loop).result()
        if status >= 500 and status != NOT_IMPLEMENTED:
            kind = json.loads(body).get("type") if body.startswith(b"{") else None
            assert kind in STATE_ANSWERS, (request[:3], status, body[:300])
        errors = [r.getMessage() for r in caplog.records
                  if r.levelno >= logging.ERROR and r.funcName != "log_request"]  # fmt: skip
        # (jupyter_server's access log writes any 5xx, the 501s included, at ERROR)
        assert errors == [], (request[:3], errors)

    with caplog.at_level(logging.INFO):
        await loop.run_in_executor(None, probe)
    assert files_outside(tmp_path, allowed) == before


def sample_path(template: str) -> str:
    """A documented path with the probe model and version in its parameters."""
    path = template
    for name, value in (("{model_name}", "probe"), ("{model_version}", "1.0")):
        path = path.replace(name, value)
    while "{" in path:
        path = path[: path.index("{")] + "x" + path[path.index("}") + 1 :]
    return path


async def test_every_documented_operation_sent_with_bare_line_feeds_is_answered(
    jp_serverapp: Any, http_server: Any, jp_http_port: int, jp_base_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    await register(jp_serverapp)
    token = jp_serverapp.identity_provider.token
    for verb, template, _ in operations():
        target = url_path_join(jp_base_url, "serve", sample_path(template).lstrip("/"))
        lines = [
            f"{verb} {target} HTTP/1.1",
            "Host: localhost",
            f"Authorization: token {token}",
            "Content-Type: application/json",
            "Content-Length: 2",
            "Connection: close",
        ]
        head = "\n".join(lines) + "\n\n[]"
        reader, writer = await asyncio.open_connection("127.0.0.1", jp_http_port)
        try:
            writer.write(head.encode())
            status_line = await asyncio.wait_for(reader.readline(), 60)  # never a hang
        finally:
            writer.close()
        assert status_line.startswith(b"HTTP/1.1 "), (verb, target, status_line)
    assert [
        r for r in caplog.records if r.levelno >= logging.ERROR and r.funcName != "log_request"
    ] == []
