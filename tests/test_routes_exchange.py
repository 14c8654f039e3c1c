"""Tests for the prediction exchange (server/http/exchange.py) through both of its writers.

Every test runs on the three ways a prediction reaches a model: the serve lane
(`LaneWriter` over a `LaneProtocol`), the full route on a connection the lane handed to
tornado (token header; `HandlerWriter` over a `RequestHandler`) and the full route from
the start (`?token=`). Clients are raw keep-alive sockets, so
what the server sends (or does not send) is seen byte for byte; a spy around the real
`Exchange` tells which writer answered, what it was asked to write, and when the
exchange saw its client leave. Real worker subprocesses serve real handlers.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from route_models import (
    STREAM,
    gate,
    register,
    release,
    release_if_waiting,
    serve_state,
    server_config,
)

from jupyter_serve.server.http.exchange import Exchange
from jupyter_serve.server.http.fastpath import LaneWriter
from jupyter_serve.server.http.inference import HandlerWriter
from jupyter_serve.server.http.lane_connection import LaneProtocol

TRANSPORTS = ["lane", "handed-over", "full-route"]
WAIT = 10  # seconds: the most any one step may take before the test fails

GATED = """
from ts.handler_utils.utils import send_intermediate_predict_response


def handle(data, context):
    if not data:
        return None

    def header(key):
        return context.get_request_header(0, key)

    if header("X-Ledger"):  # note which requests reached the handler
        with open(header("X-Ledger"), "a") as ledger:
            ledger.write(header("X-Tag") + "\\n")
    if header("X-Busy"):  # say so with a chunk before waiting at the gate
        send_intermediate_predict_response(["busy"], context.request_ids, "ok", 200, context)
    if header("X-Gate"):
        with open(header("X-Gate"), "rb") as gate:
            gate.read()
    return [header("X-Tag")]
"""


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


async def within(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, WAIT)


# ---- the spy: the real exchange, watched ----------------------------------------------


class Recorder:
    """A writer that notes each call (by name) before passing it on to the real one."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.writer, name)

        def record(*args: Any) -> Any:
            self.calls.append(name)
            return method(*args)

        return record


@dataclass
class Spy:
    started: asyncio.Queue[Exchange] = field(default_factory=asyncio.Queue)
    gone: asyncio.Queue[Exchange] = field(default_factory=asyncio.Queue)

    async def next_started(self) -> Exchange:
        exchange: Exchange = await within(self.started.get())
        return exchange


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    watched = Spy()
    init, start, client_gone = Exchange.__init__, Exchange.start, Exchange.client_gone

    def spied_init(self: Exchange, writer: Any, *args: Any, **kwargs: Any) -> None:
        init(self, Recorder(writer), *args, **kwargs)

    def spied_start(self: Exchange, *args: Any) -> None:
        start(self, *args)
        watched.started.put_nowait(self)

    def spied_client_gone(self: Exchange) -> None:
        client_gone(self)
        watched.gone.put_nowait(self)

    monkeypatch.setattr(Exchange, "__init__", spied_init)
    monkeypatch.setattr(Exchange, "start", spied_start)
    monkeypatch.setattr(Exchange, "client_gone", spied_client_gone)
    return watched


def calls(exchange: Exchange) -> list[str]:
    recorder = exchange.writer
    assert isinstance(recorder, Recorder)
    return recorder.calls


def assert_transport(exchange: Exchange, transport: str) -> None:
    """The exchange wrote through the writer (and connection) `transport` stands for."""
    writer = exchange.writer.writer  # type: ignore[attr-defined]
    if transport != "lane":
        assert isinstance(writer, HandlerWriter)
        return
    assert isinstance(writer, LaneWriter)
    assert isinstance(writer.connection, LaneProtocol)


# ---- raw clients -------------------------------------------------------------------------


class Client:
    """One keep-alive HTTP/1.1 connection, written by hand; `transport` decides how it
    authenticates (a token header, but `?token=` for the full route from the start)."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Any, kind: str
    ) -> None:
        self.reader, self.writer = reader, writer
        self.base = server.base_url
        self.token = server.identity_provider.token
        self.kind = kind

    def send(self, method: str, path: str, body: bytes = b"", **headers: str) -> None:
        query = f"?token={self.token}" if self.kind == "full-route" else ""
        auth = [] if query else [f"Authorization: token {self.token}"]
        fields = [*auth, f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
        lines = [f"{method} {self.base}{path}{query} HTTP/1.1", "Host: localhost", *fields]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    def post(self, model: str, body: bytes = b"x", **headers: str) -> None:
        self.send("POST", f"serve/predictions/{model}", body, **headers)

    async def head(self) -> tuple[int, dict[str, str]]:
        raw = await within(self.reader.readuntil(b"\r\n\r\n"))
        status_line, *lines = raw.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(status_line.split()[1]), headers

    async def chunk(self) -> bytes | None:
        """The next chunk exactly as framed; None for the terminating chunk."""
        size = int((await within(self.reader.readuntil(b"\r\n"))).split(b";")[0], 16)
        data = await within(self.reader.readexactly(size + 2))
        assert data.endswith(b"\r\n")
        return data[:-2] or None

    async def answer(self) -> tuple[int, dict[str, str], bytes]:
        status, headers = await self.head()
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while (data := await self.chunk()) is not None:
                body += data
        else:
            body = await within(self.reader.readexactly(int(headers["content-length"])))
        return status, headers, body

    async def rest(self) -> bytes:
        """Everything the server still sends, up to its closing of the connection."""
        data: bytes = await within(self.reader.read())
        return data


Connect = Callable[[], AbstractAsyncContextManager[Client]]


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def connect(jp_serverapp: Any, http_server: Any, jp_http_port: int, transport: str) -> Connect:
    """Open a client on `transport` (`http_server` makes the server listen, lane attached)."""

    @asynccontextmanager
    async def connected() -> AsyncIterator[Client]:
        reader, writer = await asyncio.open_connection("127.0.0.1", jp_http_port)
        client = Client(reader, writer, jp_serverapp, transport)
        try:
            if transport == "handed-over":  # a Jupyter route first: the lane hands over
                client.send("GET", "api/status")
                assert (await client.answer())[0] == 200
            yield client
        finally:
            writer.close()

    return connected


# ---- helpers -----------------------------------------------------------------------------


def requests_counted(serverapp: Any, model: str) -> float:
    metrics = serverapp.web_app.settings["serve_metrics"]
    labels = {"model_name": model, "model_version": "default", "hostname": metrics.hostname}
    return float(metrics.value("ts_inference_requests_total", labels))


def error_json(code: int, kind: str, message: str, cause: str | None = None) -> bytes:
    body = {"code": code, "type": kind, "message": message, **({"cause": cause} if cause else {})}
    return (json.dumps(body, indent=2) + "\n").encode()


# ---- the tests ---------------------------------------------------------------------------


async def test_a_streamed_answer_goes_out_chunk_by_chunk_and_the_connection_goes_on(
    jp_serverapp: Any, connect: Connect, spy: Spy, transport: str, tmp_path: Path
) -> None:
    await register(jp_serverapp, name="echo_stream", source=STREAM)
    fifo = gate(tmp_path)
    async with connect() as client:
        client.post("echo_stream", b"foo", **{"X-Gate": str(fifo)})
        exchange = await spy.next_started()
        assert_transport(exchange, transport)
        status, headers = await client.head()
        assert (status, headers["transfer-encoding"]) == (200, "chunked")
        assert "content-length" not in headers
        assert headers["content-type"] == "text/plain"
        uuid.UUID(headers["x-request-id"])
        assert await client.chunk() == b"hello "  # sent just before the handler's gate
        await within(release(fifo))  # waits for the handler to open it: no lost release
        assert [await client.chunk() for _ in range(4)] == [b"hello ", b"hello ",
                                                          b"hello world ", None]  # fmt: skip
        assert calls(exchange) == ["begin", "chunk", "chunk", "end"]
        client.post("echo_stream", b"foo", **{"X-Stream": "no"})  # the same connection
        status, headers, body = await client.answer()
        assert (status, headers["content-length"], body) == (200, "12", b"hello world ")
    assert requests_counted(jp_serverapp, "echo_stream") == 2


async def test_past_client_timeout_nothing_is_sent_until_the_client_leaves(
    jp_serverapp: Any, jp_fetch: Any, connect: Connect, spy: Spy, transport: str, tmp_path: Path
) -> None:
    await register(jp_serverapp, name="gated", source=GATED,
                   model_config="clientTimeoutInMills: 300\n")  # fmt: skip
    fifo = gate(tmp_path)
    try:
        async with connect() as client:
            client.post("gated", **{"X-Tag": "late", "X-Gate": str(fifo)})
            dropped = await spy.next_started()
            assert_transport(dropped, transport)
            assert dropped.pending is not None
            await within(asyncio.wait([dropped.pending]))  # the client timeout cancels it
            await release_if_waiting(fifo)  # the late result comes back, to be thrown away
            after = await jp_fetch("serve", "predictions", "gated", method="POST", body=b"x",
                                   headers={"X-Tag": "next"})  # fmt: skip
            assert after.body == b"next"  # the worker is done with the late one
            assert (calls(dropped), dropped.over) == ([], False)  # nothing sent, still open
            client.writer.write_eof()  # the client gives up
            assert await within(spy.gone.get()) is dropped
            assert await client.rest() == b""  # not a byte, ever
    finally:
        await release_if_waiting(fifo)
    assert requests_counted(jp_serverapp, "gated") == 1  # the dropped one is not counted


async def test_past_client_timeout_a_streamed_answer_is_cut_short(
    jp_serverapp: Any, connect: Connect, spy: Spy, transport: str, tmp_path: Path
) -> None:
    await register(jp_serverapp, name="echo_stream", source=STREAM,
                   model_config="clientTimeoutInMills: 400\n")  # fmt: skip
    fifo = gate(tmp_path)
    try:
        async with connect() as client:
            client.post("echo_stream", b"foo", **{"X-Gate": str(fifo)})
            exchange = await spy.next_started()
            assert_transport(exchange, transport)
            assert (await client.head())[0] == 200
            assert await client.chunk() == b"hello "
            assert await client.rest() == b""  # closed: no terminating chunk
            assert calls(exchange) == ["begin", "cut"]
    finally:
        await release_if_waiting(fifo)
    assert requests_counted(jp_serverapp, "echo_stream") == 0


async def test_a_client_that_leaves_takes_its_queued_request_with_it(
    jp_serverapp: Any,
    jp_fetch: Any,
    http_server: Any,
    jp_http_port: int,
    connect: Connect,
    spy: Spy,
    transport: str,
    tmp_path: Path,
) -> None:
    await register(jp_serverapp, name="ledger", source=GATED)
    fifo, ledger = gate(tmp_path), tmp_path / "ledger.txt"
    tags = {"X-Ledger": str(ledger)}
    busy_reader, busy = await asyncio.open_connection("127.0.0.1", jp_http_port)
    try:
        busy_client = Client(busy_reader, busy, jp_serverapp, "lane")
        busy_client.post("ledger", **tags, **{"X-Tag": "first", "X-Busy": "1", "X-Gate": str(fifo)})
        assert (await busy_client.head())[0] == 200
        assert await busy_client.chunk() == b"busy"  # the one worker is taken
        await spy.next_started()
        async with connect() as client:
            client.post("ledger", **tags, **{"X-Tag": "second"})
            leaving = await spy.next_started()
            assert_transport(leaving, transport)
        assert await within(spy.gone.get()) is leaving
        assert leaving.pending is not None
        assert leaving.pending.cancelled()
        await within(release(fifo))
        assert await busy_client.chunk() == b"first"
        third = await jp_fetch("serve", "predictions", "ledger", method="POST", body=b"x",
                               headers={**tags, "X-Tag": "third"})  # fmt: skip
        assert third.body == b"third"
    finally:
        busy.close()
        await release_if_waiting(fifo)
    assert ledger.read_text().split() == ["first", "third"]  # "second" never reached it
    assert calls(leaving) == []
    assert requests_counted(jp_serverapp, "ledger") == 2


def fail_at(where: str, serverapp: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection: a bug in the model lookup, or a non-ServeError result."""
    registry, _ = serve_state(serverapp)
    if where == "lookup":

        def broken(*args: Any) -> Any:
            raise RuntimeError("a bug in the server")

        monkeypatch.setattr(registry, "get", broken)
        return

    def broken_submit(*args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.get_loop().call_soon(future.set_exception, RuntimeError("a bug in the server"))
        return future

    monkeypatch.setattr(registry.get("probe").batcher, "submit", broken_submit)


@pytest.mark.parametrize("where", ["lookup", "result"])
async def test_an_unexpected_error_is_answered_with_a_500_json(
    jp_serverapp: Any,
    connect: Connect,
    spy: Spy,
    transport: str,
    where: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await register(jp_serverapp)
    fail_at(where, jp_serverapp, monkeypatch)
    async with connect() as client:
        client.post("probe")
        exchange = await spy.next_started()
        assert_transport(exchange, transport)
        status, headers, body = await client.answer()
    assert (status, headers["content-type"]) == (500, "application/json")
    assert body == error_json(500, "InternalServerException", "Internal server error")
    uuid.UUID(headers["x-request-id"])
    assert calls(exchange) == ["error"]
    assert "a bug in the server" in caplog.text  # the traceback is in the server's log
    if where == "result":  # the model was found: the answer is counted
        assert requests_counted(jp_serverapp, "probe") == 1


async def test_a_serve_error_is_torchserves_error_json_on_every_transport(
    jp_serverapp: Any, connect: Connect, spy: Spy, transport: str
) -> None:
    await register(jp_serverapp)
    async with connect() as client:
        client.post("probe", **{"X-Mode": "raise"})
        exchange = await spy.next_started()
        assert_transport(exchange, transport)
        status, headers, body = await client.answer()
        assert (status, headers["content-type"]) == (503, "application/json")
        cause = "RuntimeError: boom"  # the handler's exception (worker/failures.py)
        assert body == error_json(503, "InternalServerException", "Prediction failed", cause)
        client.post("nobody")
        status, _, body = await client.answer()
    assert status == 404
    assert body == error_json(404, "ModelNotFoundException", "Model not found: nobody")
    assert requests_counted(jp_serverapp, "probe") == 1  # an unknown model counts nowhere


NOCONTENT = """
def handle(data, context):
    if not data:
        return None
    context.set_response_status(204, "", 0)
    return ["a body a 204 cannot have"]
"""


@pytest.mark.parametrize("transport", ["full-route"])
async def test_a_result_tornado_refuses_to_send_is_a_500_on_the_full_route(
    jp_serverapp: Any, connect: Connect, spy: Spy, transport: str
) -> None:
    await register(jp_serverapp, name="nocontent", source=NOCONTENT)
    async with connect() as client:
        client.post("nocontent")
        exchange = await spy.next_started()
        status, _, body = await client.answer()
    assert status == 500  # as tornado answers any exception before the headers left
    assert body == error_json(500, "InternalServerException", "Internal server error")
    assert calls(exchange) == ["answer", "error"]
    metrics = jp_serverapp.web_app.settings["serve_metrics"]
    assert metrics.value("Requests5XX", {"Level": "Host", "Hostname": metrics.hostname}) == 1


async def test_a_path_that_is_not_utf8_is_tornados_400_on_every_transport(
    jp_serverapp: Any, connect: Connect, transport: str
) -> None:
    async with connect() as client:
        client.send("POST", "serve/predictions/probe/%FF", b"x")
        status, headers, body = await client.answer()
    assert (status, headers["content-type"]) == (400, "application/json")
    assert body == error_json(400, "BadRequestException", "Invalid unicode in url: b'\\xff'")
