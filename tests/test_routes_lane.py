"""The serve lane: predictions answered at the connection, everything else handed to tornado.

Raw keep-alive connections show what an HTTP client sees: the lane answering, a
connection moving to tornado at its first other request (with the bytes the lane
had read), pipelined requests, `Connection: close`, and heads the lane leaves to
tornado. Which side holds a connection is read from tornado's own connection set.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from raw_http import connected
from route_models import BROWSER_ORIGIN, STREAM, cors_server_config, register, server_config

from jupyter_serve.server.http.lane import Lane, PrefixedIOStream
from jupyter_serve.server.http.lane_connection import LaneProtocol
from jupyter_serve.server.http.lane_http import LaneRequest, NotForTheLane
from jupyter_serve.server.http.requests import NO_CACHE_HEADERS


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path, max_request_size=4096)


@pytest.fixture
def lane(jp_serverapp: Any, http_server: Any) -> Lane:
    """The lane the conftest attached to the test server (it must be there)."""
    found = jp_serverapp.web_app.settings["serve_app"].lane
    assert isinstance(found, Lane)
    assert found.http_server is http_server
    return found


def request(base: str, token: str, path: str, body: bytes = b"x", *extra: str,
            method: str = "POST") -> bytes:  # fmt: skip
    lines = [f"{method} {base}{path} HTTP/1.1", "Host: localhost", f"Authorization: token {token}",
             f"Content-Length: {len(body)}", *extra]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def probe_model(serverapp: Any) -> tuple[str, str]:
    """Register the probe model; the base URL and token to reach it."""
    await register(serverapp)
    return serverapp.base_url, serverapp.identity_provider.token


async def test_keep_alive_predictions_stay_in_the_lane(
    jp_serverapp: Any, lane: Lane, http_server: Any, jp_http_port: int
) -> None:
    probe = await probe_model(jp_serverapp)
    async with connected(jp_http_port) as raw:
        for n in range(3):
            raw.send(request(*probe, "serve/predictions/probe", f"body {n}".encode()))
            status, headers, body = await raw.response()
            assert (status, body) == (200, f"body {n}".encode())
            assert len(headers["x-request-id"]) == 36
        assert len(lane.connections) == 1
        assert not http_server._connections  # tornado never saw the connection


async def test_the_first_other_request_hands_the_connection_to_tornado(
    jp_serverapp: Any, lane: Lane, http_server: Any, jp_http_port: int
) -> None:
    probe = await probe_model(jp_serverapp)
    async with connected(jp_http_port) as raw:
        raw.send(request(*probe, "serve/predictions/probe", b"lane"))
        assert (await raw.response())[2] == b"lane"
        raw.send(request(*probe, "api/status", b"", method="GET"))  # Jupyter's own route
        status, _, body = await raw.response()
        assert status == 200
        assert "started" in json.loads(body)
        assert not lane.connections
        assert len(http_server._connections) == 1
        raw.send(request(*probe, "serve/predictions/probe", b"tornado now"))  # the full route
        status, _, body = await raw.response()
        assert (status, body) == (200, b"tornado now")


async def test_pipelined_requests_are_answered_in_order_across_the_handover(
    jp_serverapp: Any, lane: Lane, jp_http_port: int
) -> None:
    probe = await probe_model(jp_serverapp)
    async with connected(jp_http_port) as raw:
        raw.send(
            request(*probe, "serve/predictions/probe", b"one")
            + request(*probe, "serve/predictions/probe", b"two")
            + request(*probe, "serve/ping", b"", method="GET")
            + request(*probe, "serve/predictions/probe", b"three")
        )
        answers = [await raw.response() for _ in range(4)]
    bodies = [body for _, _, body in answers]
    assert bodies == [b"one", b"two", b'{\n  "status": "Healthy"\n}\n', b"three"]


async def test_connection_close_is_answered_then_closed(
    jp_serverapp: Any, lane: Lane, jp_http_port: int
) -> None:
    probe = await probe_model(jp_serverapp)
    async with connected(jp_http_port) as raw:
        raw.send(request(*probe, "serve/predictions/probe", b"bye", "Connection: close"))
        status, headers, body = await raw.response()
        assert (status, headers["connection"], body) == (200, "close", b"bye")
        assert await raw.closed_by_server()


@pytest.mark.parametrize(
    ("path", "chunked", "expected"),
    [
        ("serve/predictions/probe", True, 200),  # a chunked body: tornado decodes it
        ("serve/predictions/pro%62e", False, 200),  # path arguments are percent-decoded
        ("serve/predictions/nobody", False, 404),
        ("serve/explanations/probe", False, 200),
    ],
)
async def test_requests_get_the_answers_tornado_gives(
    jp_serverapp: Any, lane: Lane, jp_http_port: int, path: str, chunked: bool, expected: int
) -> None:
    base, token = await probe_model(jp_serverapp)
    async with connected(jp_http_port) as raw:
        if chunked:
            head = request(base, token, path, b"", "Transfer-Encoding: chunked")
            raw.send(head.replace(b"Content-Length: 0\r\n", b"") + b"1\r\nx\r\n0\r\n\r\n")
        else:
            raw.send(request(base, token, path))
        status, _, body = await raw.response()
    assert status == expected
    if expected == 404:
        assert json.loads(body)["type"] == "ModelNotFoundException"
    else:
        assert body == b"x"


async def test_a_body_over_max_request_size_gets_413_from_the_full_path(
    jp_serverapp: Any, lane: Lane, http_server: Any, jp_http_port: int
) -> None:
    probe = await probe_model(jp_serverapp)
    async with connected(jp_http_port) as raw:
        raw.send(request(*probe, "serve/predictions/probe", b"x" * 5000))
        status, _, body = await raw.response()
        assert status == 413
        assert json.loads(body)["type"] == "RequestEntityTooLargeException"
        assert len(http_server._connections) == 1  # the lane left the big body to tornado


class TestBrowsers:
    """A request with an `Origin` goes to the full route, where jupyter_server answers CORS."""

    @pytest.fixture
    def jp_server_config(self, tmp_path: Path) -> dict[str, Any]:
        return cors_server_config(tmp_path)

    async def test_a_request_with_an_origin_gets_jupyter_servers_cors_headers(
        self, jp_serverapp: Any, lane: Lane, http_server: Any, jp_http_port: int
    ) -> None:
        probe = await probe_model(jp_serverapp)
        async with connected(jp_http_port) as raw:
            origin = f"Origin: {BROWSER_ORIGIN}"
            raw.send(request(*probe, "serve/predictions/probe", b"x", origin))
            status, headers, body = await raw.response()
            assert (status, body) == (200, b"x")
            assert headers["access-control-allow-origin"] == BROWSER_ORIGIN
            assert len(http_server._connections) == 1  # tornado's, not the lane's


async def test_a_connection_stalled_mid_head_is_closed_after_the_header_timeout(
    jp_serverapp: Any, lane: Lane, jp_http_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lane, "header_timeout", 0.3)  # tornado's default: 3600 s
    probe = await probe_model(jp_serverapp)
    async with connected(jp_http_port) as raw:
        raw.send(request(*probe, "serve/predictions/probe", b"served"))
        assert (await raw.response())[2] == b"served"
        raw.send(b"POST /serve/predictions/probe HTTP/1.1\r\n")  # ...then stalls
        assert await asyncio.wait_for(raw.closed_by_server(), 20)
    assert not lane.connections


async def test_a_wrong_token_is_refused_by_jupyter_server(
    jp_serverapp: Any, lane: Lane, jp_http_port: int
) -> None:
    base, _ = await probe_model(jp_serverapp)
    async with connected(jp_http_port) as raw:
        raw.send(request(base, "wrong", "serve/predictions/probe"))
        assert (await raw.response())[0] == 403


async def test_a_malformed_head_gets_tornados_400_and_the_server_serves_on(
    jp_serverapp: Any, lane: Lane, jp_http_port: int
) -> None:
    base, token = await probe_model(jp_serverapp)
    async with connected(jp_http_port) as raw:
        raw.send(f"POST {base}serve/predictions/probe HTTP/1.1\r\nHost: localhost\r\n"
                 f"Bad Header: x\r\nAuthorization: token {token}\r\n\r\n".encode())  # fmt: skip
        assert (await raw.response())[0] == 400
    async with connected(jp_http_port) as fresh:
        fresh.send(request(base, token, "serve/predictions/probe", b"fine"))
        assert (await fresh.response())[2] == b"fine"


async def test_a_streamed_answer_is_chunked_and_the_connection_goes_on(
    jp_serverapp: Any, lane: Lane, jp_http_port: int
) -> None:
    await register(jp_serverapp, name="echo_stream", source=STREAM)
    base, token = jp_serverapp.base_url, jp_serverapp.identity_provider.token
    async with connected(jp_http_port) as raw:
        for _ in range(2):
            raw.send(request(base, token, "serve/predictions/echo_stream", b"foo"))
            status, headers, body = await raw.response()
            assert (status, headers["transfer-encoding"]) == (200, "chunked")
            assert body == b"hello hello hello hello world "
        assert len(lane.connections) == 1


class HeldTransport(asyncio.Transport):
    """An asyncio transport whose last answer has not left yet (`pending` bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self.pending, self.limits, self.aborted = 10, (-1, -1), False

    def get_write_buffer_size(self) -> int:
        return self.pending

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.limits = (high or 0, low or 0)

    def pause_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


class OnlyTornadosLane:
    """A lane for which no request qualifies; it records what it hands to tornado."""

    header_timeout = 3600.0

    def __init__(self) -> None:
        self.connections: set[Any] = set()
        self.handed: list[bytes] = []

    def route(self, request: LaneRequest, may_ask: bool = True) -> Any:
        raise NotForTheLane("not ours")

    def hand_over(self, sock: Any, address: Any, unread_bytes: bytes) -> None:
        self.handed.append(unread_bytes)


async def test_the_handover_waits_until_earlier_answers_have_left() -> None:
    lane, transport = OnlyTornadosLane(), HeldTransport()
    protocol = LaneProtocol(lane, None, None)  # type: ignore[arg-type]
    protocol.connection_made(transport)
    request = b"GET /api/status HTTP/1.1\r\nHost: h\r\n\r\n"
    protocol.data_received(request)
    assert lane.handed == []  # an answer is still in the write buffer
    assert transport.limits == (0, 0)  # so asyncio calls resume_writing once it drains
    assert not transport.aborted
    transport.pending = 0
    protocol.resume_writing()
    assert lane.handed == [request]  # the unread request goes to tornado whole
    assert transport.aborted  # the lane's descriptor closes; tornado reads its own
    assert protocol not in lane.connections


async def test_the_handed_over_stream_reads_the_unread_bytes_then_its_socket() -> None:
    mine, theirs = socket.socketpair()
    mine.setblocking(False)
    stream = PrefixedIOStream(mine, b"GET / HTTP/1.1\r\n")
    try:
        theirs.sendall(b"Host: h\r\n\r\nrest")
        head = await stream.read_until(b"\r\n\r\n")
        assert head == b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
        assert await stream.read_bytes(4) == b"rest"
    finally:
        stream.close()
        theirs.close()


class TestSwitchedOff:
    @pytest.fixture
    def jp_server_config(self, tmp_path: Path) -> dict[str, Any]:
        return server_config(tmp_path, fast_predictions=False)

    async def test_no_lane(self, jp_serverapp: Any, http_server: Any) -> None:
        assert getattr(jp_serverapp.web_app.settings["serve_app"], "lane", None) is None
        assert "handle_stream" not in vars(http_server)


HEADERS = """
def handle(data, context):
    if data is None:
        return None
    context.set_response_status(201, "Made")
    context.set_response_content_type(0, "text/x-first")
    context.set_response_header(0, "content-TYPE", "text/x-replaced")
    context.set_response_header(0, "x-b", "2")
    context.set_response_header(0, "X-A", "1")
    context.set_response_header(0, "x-a", "3")
    return ["made"]
"""


async def test_the_lane_writes_the_handlers_status_and_headers_as_the_full_route(
    jp_serverapp: Any, lane: Lane, jp_http_port: int
) -> None:
    """The lane's answer head, byte for byte, carries what the full route's does (a
    connection handed over first) of the handler's answer: status, reason, headers."""
    await register(jp_serverapp, name="headers", source=HEADERS)
    base, token = jp_serverapp.base_url, jp_serverapp.identity_provider.token
    heads = []
    for handover_first in (False, True):
        async with connected(jp_http_port) as raw:
            if handover_first:  # another route first: tornado serves the connection from here
                raw.send(request(base, token, "serve/ping", b"", method="GET"))
                assert (await raw.response())[0] == 200
            raw.send(request(base, token, "serve/predictions/headers"))
            head = await raw.reader.readuntil(b"\r\n\r\n")
            assert await raw.reader.readexactly(4) == b"made"
        heads.append(re.sub(rb"X-Request-Id: [0-9a-f-]+", b"X-Request-Id: ID", head))
    lane_head, full_head = heads
    full_lines = full_head.split(b"\r\n")
    assert full_lines[0] == b"HTTP/1.1 201 Made"
    no_cache = [f"{name}: {value}".encode() for name, value in NO_CACHE_HEADERS.items()]
    for line in (b"Content-Type: text/x-first", b"X-B: 2", b"X-A: 3", b"Content-Length: 4",
                 *no_cache):  # fmt: skip
        assert line in full_lines
    assert lane_head == (
        b"HTTP/1.1 201 Made\r\nContent-Type: text/x-first\r\nX-B: 2\r\nX-A: 3\r\n"
        b"X-Request-Id: ID\r\n"
        + b"".join(line + b"\r\n" for line in no_cache)
        + b"Content-Length: 4\r\n\r\n"
    )  # names in Http-Header-Case; a later x-a replaces X-A in its place


INJECTING = """
def handle(data, context):
    if data is None:
        return None
    context.set_response_header(0, "x-echo", "a\\r\\nSet-Cookie: stolen=1")
    return ["body"]
"""


async def test_a_header_value_with_cr_lf_never_reaches_the_client_on_either_path(
    jp_serverapp: Any, lane: Lane, jp_http_port: int
) -> None:
    """A handler echoing request bytes into a header cannot inject one: the lane sends no
    head at all and cuts the connection; the full route never sends the header."""
    await register(jp_serverapp, name="inject", source=INJECTING)
    base, token = jp_serverapp.base_url, jp_serverapp.identity_provider.token
    for handover_first in (False, True):
        async with connected(jp_http_port) as raw:
            if handover_first:
                raw.send(request(base, token, "serve/ping", b"", method="GET"))
                assert (await raw.response())[0] == 200
            raw.send(request(base, token, "serve/predictions/inject"))
            if handover_first:  # the full route: a 500, the header never sent
                status, headers, body = await raw.response()
                assert status == 500
                assert "stolen" not in str(headers)
                assert b"stolen" not in body
            else:
                assert await raw.reader.read() == b""
