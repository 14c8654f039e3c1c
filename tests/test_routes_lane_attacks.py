"""The serve lane under attack: the same bytes get the same answers as plain tornado.

Each case sends raw bytes on a fresh connection twice: once with the lane reading
the server's connections first, once with the lane detached (tornado's HTTP layer
and jupyter_server's routes alone). The answers (status and body of each, in
order) and what then happens to the connection (closed by the server, or left
open) must be the same, and nothing may be logged at ERROR level (a traceback).
Hypothesis generates the requests: pipelined mixes of predictions, other routes,
wrong or missing credentials, remote hosts, odd framing (duplicate or mangled
`Content-Length`, `Transfer-Encoding`, folded lines, bare line feeds, control
characters, non-UTF-8 path arguments); fixed cases add request smuggling attempts
followed by an unauthenticated prediction, which may never run. Last, a client
that pipelines requests and never reads costs the server bounded memory.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httptools
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from route_models import register, server_config

from jupyter_serve.server.http.lane import Lane
from jupyter_serve.server.http.lane_connection import READ_SIZE, LaneProtocol

IDLE = 3.0  # seconds without a byte after which a connection counts as left open
Outcome = tuple[tuple[tuple[int, bytes], ...], str]


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path, max_request_size=4096)


class Answers:
    """httptools callbacks collecting each response's status and body."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.done: list[tuple[int, bytes]] = []
        self.body = b""

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.done.append((self.parser.get_status_code(), self.body))
        self.body = b""


async def outcome(port: int, data: bytes) -> Outcome:
    """The answers to `data` and whether the server then closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers = Answers()
    state = "open"
    try:
        writer.write(data)
        while True:
            try:
                chunk = await asyncio.wait_for(reader.read(65536), IDLE)
            except (asyncio.TimeoutError, ConnectionError):
                break
            if not chunk:
                state = "closed"
                break
            answers.parser.feed_data(chunk)
    except httptools.HttpParserError:
        state = "unparsable answer"
    finally:
        writer.close()
    return tuple(answers.done), state


class Bench:
    """Sends the same bytes through the lane and through plain tornado."""

    def __init__(self, lane: Lane, port: int, serverapp: Any, token: str) -> None:
        self.lane, self.port, self.serverapp, self.token = lane, port, serverapp, token
        self.base: str = serverapp.base_url

    async def ready(self) -> Bench:
        await register(self.serverapp)
        return self

    async def both(self, data: bytes) -> tuple[Outcome, Outcome]:
        self.lane.attach()
        through_lane = await outcome(self.port, data)
        self.lane.detach()
        return through_lane, await outcome(self.port, data)

    def request(self, path: str = "serve/predictions/probe", body: bytes = b"x",
                *headers: str, auth: bool = True, close: bool = False) -> bytes:  # fmt: skip
        lines = [f"POST {self.base}{path} HTTP/1.1", "Host: localhost",
                 "Content-Type: application/octet-stream", f"Content-Length: {len(body)}",
                 *headers]  # fmt: skip
        lines += [f"Authorization: token {self.token}"] if auth else []
        lines += ["Connection: close"] if close else []
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    def last(self) -> bytes:
        """A well-formed authenticated request closing the connection after its answer."""
        return self.request(body=b"last", close=True)


@pytest.fixture
def bench(jp_serverapp: Any, http_server: Any, jp_http_port: int) -> Bench:
    """The bench; each test first awaits `ready()` (the probe model registered)."""
    lane = jp_serverapp.web_app.settings["serve_app"].lane
    assert isinstance(lane, Lane)
    return Bench(lane, jp_http_port, jp_serverapp, jp_serverapp.identity_provider.token)


def errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]


SMUGGLED = b"SMUGGLED"


def smuggling_cases(bench: Bench) -> dict[str, bytes]:
    """Attempts to hide an unauthenticated prediction inside an authenticated request."""
    hidden = bench.request(body=SMUGGLED, auth=False)
    chunked = b"0\r\n\r\n" + hidden
    token = f"Authorization: token {bench.token}"
    head = f"POST {bench.base}serve/predictions/probe HTTP/1.1\r\nHost: localhost\r\n{token}\r\n"
    cases = {
        "CL+TE": (f"Content-Length: {len(chunked)}\r\nTransfer-Encoding: chunked", chunked),
        "TE+CL": ("Transfer-Encoding: chunked\r\nContent-Length: 3", chunked),
        "duplicate CL": (f"Content-Length: 0\r\nContent-Length: {len(hidden)}", hidden),
        "CL list": (f"Content-Length: 0, {len(hidden)}", hidden),
        "obs-fold CL": (f"X: y\r\n Content-Length: {len(hidden)}", hidden),
        "bare LF head": (f"Content-Length: {len(hidden)}\n", hidden),
        "bare CR": (f"Content-Length: 0\rContent-Length: {len(hidden)}", hidden),
        "TE obfuscated": (
            f"Transfer-Encoding: xchunked\r\nContent-Length: {len(chunked)}",
            chunked,
        ),
        "space before colon": (f"Content-Length : {len(hidden)}", hidden),
    }
    return {name: (head + fields + "\r\n\r\n").encode() + body
            for name, (fields, body) in cases.items()}  # fmt: skip


@pytest.mark.parametrize(
    "case",
    ["CL+TE", "TE+CL", "duplicate CL", "CL list", "obs-fold CL", "bare LF head", "bare CR",
     "TE obfuscated", "space before colon"],
)  # fmt: skip
async def test_smuggling_attempts_run_nothing_unauthenticated(
    bench: Bench, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    await bench.ready()
    data = smuggling_cases(bench)[case] + bench.request(body=SMUGGLED, auth=False)
    through_lane, through_tornado = await bench.both(data)
    assert through_lane == through_tornado
    answers, _ = through_lane
    assert (200, SMUGGLED) not in answers
    statuses = [status for status, _ in answers]
    assert statuses.count(200) <= 1  # at most the authenticated request itself ran
    assert errors_logged(caplog) == []


async def test_a_parse_error_loses_none_of_the_requests_behind_it(
    bench: Bench, caplog: pytest.LogCaptureFixture
) -> None:
    await bench.ready()
    data = (
        bench.request(body=b"one")
        + bench.request("serve/predictions/%ff%fe")  # not UTF-8: tornado's 400
        + bench.request(body=b"two", close=True)
    )
    through_lane, through_tornado = await bench.both(data)
    assert through_lane == through_tornado
    assert [status for status, _ in through_lane[0]] == [200, 400, 200]
    assert json.loads(through_lane[0][1][1])["type"] == "BadRequestException"
    assert through_lane[0][2] == (200, b"two")
    assert errors_logged(caplog) == []


@pytest.mark.parametrize("route", ["api/status", "serve/predictions/probe"])
async def test_a_head_over_tornados_limit_closes_the_connection_as_tornado_does(
    bench: Bench, route: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A head of 70,000 bytes sent at once: the lane used to hand it over with its bytes
    already read, and tornado then waited on the socket for them, forever."""
    await bench.ready()
    big = f"POST {bench.base}{route} HTTP/1.1\r\nHost: localhost\r\nX-Big: {'a' * 70_000}\r\n\r\n"
    through_lane, through_tornado = await bench.both(bench.request() + big.encode())
    assert through_lane == through_tornado
    assert through_lane == (((200, b"x"),), "closed")  # the request before it is answered
    assert errors_logged(caplog) == []


@pytest.mark.parametrize(("eol", "end"), [("\n", "\n\n"), ("\r\n", "\r\n\n"), ("\n", "\n\r\n")])
async def test_a_head_ending_in_a_bare_line_feed_is_answered_as_tornado_answers_it(
    bench: Bench, eol: str, end: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A whole request whose blank line is not CRLF CRLF, alone on its connection: the lane
    used to wait for a CRLF CRLF that never came; now tornado reads it, as without the lane."""
    await bench.ready()
    lines = [f"GET {bench.base}serve/ping HTTP/1.1", "Host: localhost",
             f"Authorization: token {bench.token}", "Connection: close"]  # fmt: skip
    through_lane, through_tornado = await bench.both((eol.join(lines) + end).encode())
    assert through_lane == through_tornado
    assert [status for status, _ in through_lane[0]] == [200]
    predictions = [f"POST {bench.base}serve/predictions/probe HTTP/1.1", "Host: localhost",
                   f"Authorization: token {bench.token}", "Content-Length: 3"]  # fmt: skip
    through_lane, through_tornado = await bench.both((eol.join(predictions) + end + "abc").encode())
    assert through_lane == through_tornado
    assert through_lane[0] == ((200, b"abc"),)
    assert errors_logged(caplog) == []


# ---- generated requests ----

TARGETS = ["serve/predictions/probe", "serve/predictions/pro%62e", "serve/explanations/probe",
           "serve/predictions/probe/1.0", "serve/predictions/nobody", "serve/predictions/%ff",
           "serve/ping", "serve/predictions/probe?x=1", "serve/models"]  # fmt: skip
HOSTS = ["Host: localhost", "Host: 127.0.0.1:1", "Host: evil.example", None,
         "Host: localhost\r\nHost: evil.example"]  # fmt: skip
AUTHS = ["token {t}", "Bearer {t}", "token wrong", None, "token {t}\r\nAuthorization: token {t}"]
EXTRAS = [
    [], ["Connection: keep-alive"], ["Origin: http://evil.example"], ["Expect: 100-continue"],
    ["Upgrade: websocket", "Connection: Upgrade"], ["X-Folded: a", " b"], ["X-Ctl: a\x01b"],
    ["Bad Name: x"], ["X-Latin: caf\xe9"], ["Cookie: _xsrf=1"], ["Transfer-Encoding: chunked"],
]  # fmt: skip
LENGTHS = ["exact", "missing", "plus-one", "minus-one", "leading-zero", "twice", "digits"]


@st.composite
def one_request(draw: Callable[..., Any], base: str, token: str) -> bytes:
    method = draw(st.sampled_from(["POST", "GET", "PUT", "DELETE", "post"]))
    target = base + draw(st.sampled_from(TARGETS))
    version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"]))
    body = draw(st.binary(max_size=24))
    lines = [f"{method} {target} {version}"]
    lines += [h for h in [draw(st.sampled_from(HOSTS))] if h]
    lines += [f"Authorization: {a.format(t=token)}" for a in [draw(st.sampled_from(AUTHS))] if a]
    extras = draw(st.sampled_from(EXTRAS))
    lines += extras
    lines += _length_lines(draw(st.sampled_from(LENGTHS)), len(body))
    eol = draw(st.sampled_from(["\r\n", "\r\n", "\r\n", "\n"]))
    if "Transfer-Encoding: chunked" in extras:
        body = b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
    return (eol.join(lines) + eol + eol).encode("latin-1") + body


def _length_lines(kind: str, size: int) -> list[str]:
    return {
        "exact": [f"Content-Length: {size}"],
        "missing": [],
        "plus-one": [f"Content-Length: {size + 1}"],
        "minus-one": [f"Content-Length: {max(size - 1, 0)}"],
        "leading-zero": [f"Content-Length: 0{size}"],
        "twice": [f"Content-Length: {size}", f"Content-Length: {size}"],
        "digits": ["Content-Length: " + "9" * 3000],
    }[kind]


async def test_generated_requests_get_the_same_answers_as_from_plain_tornado(
    bench: Bench, caplog: pytest.LogCaptureFixture
) -> None:
    await bench.ready()
    loop = asyncio.get_running_loop()
    requests = st.lists(one_request(bench.base, bench.token), min_size=1, max_size=3)

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(requests)
    def compare(pipelined: list[bytes]) -> None:
        data = b"".join(pipelined) + bench.last()
        both = asyncio.run_coroutine_threadsafe(bench.both(data), loop).result()
        assert both[0] == both[1], data
        errors = errors_logged(caplog)
        assert errors == [], (data, errors)

    # hypothesis drives the examples from a thread while this event loop serves them
    await loop.run_in_executor(None, compare)


# ---- flow control ----


async def test_a_client_that_never_reads_costs_bounded_memory(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    paused = asyncio.Event()
    original = LaneProtocol.pause_writing

    def pause_writing(self: LaneProtocol) -> None:
        original(self)
        paused.set()

    monkeypatch.setattr(LaneProtocol, "pause_writing", pause_writing)
    await bench.ready()
    body = b"y" * 4000
    one = bench.request(body=body)
    _, writer = await asyncio.open_connection("127.0.0.1", bench.port)
    try:
        writer.transport.set_write_buffer_limits(high=64 * 1024 * 1024)
        writer.write(one * 20_000)  # 80 MB of pipelined requests, whose answers are never read
        await asyncio.wait_for(paused.wait(), 120)
        (connection,) = bench.lane.connections
        assert connection.transport is not None
        assert not connection.reading
        assert not connection.writing
        held = connection.transport.get_write_buffer_size()
        assert held <= 64 * 1024 + 2 * len(body) + 1024  # asyncio's high-water mark + one answer
        assert len(connection.buffer) <= READ_SIZE + 256 * 1024  # + one read of asyncio's
    finally:
        writer.close()
