"""The serve lane: token-authenticated predictions answered at the connection.

Profiling the lean path (`fastpath.py`) showed most of the Jupyter server's CPU per
prediction in tornado's HTTP/1.1 layer itself: `HTTP1Connection`'s coroutines,
its strict header parsing, `HTTPServerRequest`, the router's delegates. Bare
tornado answers an echo at about 9k req/s on this machine; the same echo read
straight from the `IOStream` at 30k (bench/RESULTS.md).

So `Lane` takes over the Jupyter server's `HTTPServer.handle_stream`: each new
connection is read by the lane first. A request the lane can read exactly as
tornado would (`lane_http.py`) whose path is `{base_url}serve/predictions/...` or
`explanations/...` and whose `Authorization: token|Bearer T` header carries the
server's token (the same constant-time check as the lean rule) is answered by the
lean path's exchange, with the same bytes as through tornado. Keep-alive
connections go on in the lane.

The first request that is anything else (another route, a cookie, `?token=`, a
wrong token, a chunked body, a malformed head...) hands the connection to
tornado for good: the bytes the lane read and did not use are put back into the
stream's read buffer and tornado's own `handle_stream` serves it from there, as if
the lane had never been. Requests are taken one at a time per connection, as
tornado does. `ServeApp.fast_predictions=False`, a server whose auth is not
jupyter_server's stock token check, or a tornado whose `IOStream` lacks the read
buffer the handover relies on, leave every connection to tornado.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from tornado import httputil, iostream
from tornado.escape import url_unescape

from .lane_http import LaneRequest, NotForTheLane, find_head_end, parse_head

LOGGER = logging.getLogger(__name__)
READ_SIZE = 65536
VERBS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH"})
_AUTH = re.compile(r"(?:token|bearer)\s+(.+)", re.IGNORECASE)
_MODEL_PATH = r"/([^/]+)(?:/([^/]+)(?:/(.+))?)?/?"

Target = Callable[[Any, list[bytes | None]], None]


def token_matches(authorization: str, token: str) -> bool:
    """True when an `Authorization: token|Bearer T` value carries `token` (constant time)."""
    found = _AUTH.match(authorization)
    if found is None or not token:
        return False
    return hmac.compare_digest(found.group(1).strip().encode(), token.encode())


def can_hand_back(stream: iostream.IOStream) -> bool:
    """Whether unread bytes can be put back into this stream for tornado to read."""
    buffer = getattr(stream, "_read_buffer", None)
    return isinstance(buffer, bytearray) and isinstance(getattr(stream, "_read_buffer_size", None),
                                                        int)  # fmt: skip


def unread(stream: iostream.IOStream, data: bytes | bytearray) -> None:
    """Put `data` back in front of what the stream has buffered but not yet delivered."""
    stream._read_buffer[0:0] = data
    stream._read_buffer_size += len(data)


class Lane:
    """Reads each new connection of one `HTTPServer` first (see the module docstring).

    `targets` maps `predictions` and `explanations` to the lean path's callables
    (called with the request and the unescaped path arguments); `token` gives the
    server's current token; `max_body` is the largest body the lane reads itself.
    """

    def __init__(self, http_server: Any, path_prefix: str, targets: dict[str, Target],
                 token: Callable[[], str], max_body: Callable[[], int]) -> None:  # fmt: skip
        self.http_server = http_server
        self.tornado_handle_stream = http_server.handle_stream
        kinds = "|".join(re.escape(kind) for kind in targets)
        self.path = re.compile(re.escape(path_prefix) + f"({kinds})" + _MODEL_PATH)
        self.targets = targets
        self.token = token
        self.max_body = max_body
        self.connections: set[LaneConnection] = set()

    def attach(self) -> None:
        """Read the server's new connections first (tornado keeps what the lane leaves)."""
        self.http_server.handle_stream = self.handle_stream

    def detach(self) -> None:
        self.http_server.handle_stream = self.tornado_handle_stream
        for connection in list(self.connections):
            connection.stream.close()

    async def handle_stream(self, stream: iostream.IOStream, address: Any) -> None:
        if not can_hand_back(stream):
            self.tornado_handle_stream(stream, address)
            return
        connection = LaneConnection(self, stream)
        self.connections.add(connection)
        try:
            leftover = await connection.serve()
        except iostream.StreamClosedError:
            return
        finally:
            self.connections.discard(connection)
        if leftover is not None:
            unread(stream, leftover)
            self.tornado_handle_stream(stream, address)

    def route(self, request: LaneRequest) -> tuple[Target, list[bytes | None]]:
        """The lean target and path arguments for `request`, or `NotForTheLane`."""
        if request.method not in VERBS or request.content_length > self.max_body():
            raise NotForTheLane("verb or size")
        found = self.path.fullmatch(request.path)
        if found is None:
            raise NotForTheLane("path")
        if not token_matches(request.headers.get("Authorization", ""), self.token()):
            raise NotForTheLane("credentials")
        kind, *args = found.groups()
        return self.targets[kind], [_unescape(arg) for arg in args]


class LaneConnection:
    """One client connection while the lane has it, and the `HTTPConnection` the lean
    exchange writes its answer to (`write_headers`, `write`, `finish`, `close`)."""

    def __init__(self, lane: Lane, stream: iostream.IOStream) -> None:
        self.lane = lane
        self.stream = stream
        self.request: LaneRequest | None = None
        self.answered: asyncio.Future[bool] | None = None
        self.on_close: Callable[[], None] | None = None
        self.chunked = False
        self.last_write: Awaitable[None] | None = None
        stream.set_close_callback(self._stream_closed)

    async def serve(self) -> bytearray | None:
        """Answer requests until the client leaves (None) or one is not for the lane
        (the bytes read and not used, for tornado)."""
        buffer = bytearray()
        while True:
            try:
                request, body_start = await self._read_head(buffer)
                target, args = self.lane.route(request)
            except NotForTheLane:
                self.stream.set_close_callback(None)
                return buffer
            request.body = await self._read_body(buffer, body_start, request.content_length)
            if not await self._exchange(request, target, args):
                return None
            if request.close_after:
                await self._close_when_written()
                return None

    async def _read_head(self, buffer: bytearray) -> tuple[LaneRequest, int]:
        while buffer.startswith(b"\r\n"):  # tornado skips blank lines before a request
            del buffer[:2]
        while (found := find_head_end(buffer)) is None:
            buffer += await self.stream.read_bytes(READ_SIZE, partial=True)
            while buffer.startswith(b"\r\n"):
                del buffer[:2]
        end, body_start = found
        return parse_head(bytes(buffer[:end])), body_start

    async def _read_body(self, buffer: bytearray, start: int, length: int) -> bytes | bytearray:
        """The body (from the buffer, then the stream); the buffer keeps what follows it.

        A body the buffer does not hold yet is read straight into its own bytearray
        (tornado's `read_into`, after handing back the part already read) rather than
        grown in the stream's buffer and sliced out.
        """
        end = start + length
        if len(buffer) >= end:
            with memoryview(buffer) as view:
                body = bytes(view[start:end])
            del buffer[:end]
            return body
        unread(self.stream, buffer[start:])
        buffer.clear()
        whole = bytearray(length)
        await self.stream.read_into(whole)
        return whole

    async def _exchange(
        self, request: LaneRequest, target: Target, args: list[bytes | None]
    ) -> bool:
        """Run one request through the lean path; False when the client left meanwhile."""
        self.request, self.chunked, self.on_close = request, False, None
        request.connection = self
        self.answered = asyncio.get_running_loop().create_future()
        target(request, args)
        return await self.answered

    async def _close_when_written(self) -> None:
        if self.last_write is not None:
            try:
                await self.last_write
            except iostream.StreamClosedError:
                return
        self.stream.close()

    def _stream_closed(self) -> None:
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            on_close()
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(False)

    # ---- the HTTPConnection side, as tornado's HTTP1Connection writes a response ----

    def set_close_callback(self, callback: Callable[[], None] | None) -> None:
        self.on_close = callback

    def write_headers(
        self,
        start_line: httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
        chunk: bytes | None = None,
    ) -> None:
        assert self.request is not None
        code = start_line.code
        self.chunked = code not in (204, 304) and code >= 200 and "Content-Length" not in headers
        lines = [f"HTTP/1.1 {code} {start_line.reason}"]
        lines.extend(f"{name}: {value}" for name, value in headers.get_all())
        if self.request.close_after:
            lines.append("Connection: close")
        if self.chunked:
            lines.append("Transfer-Encoding: chunked")
        for line in lines:
            if "\r" in line or "\n" in line:
                raise ValueError(f"Illegal characters (CR or LF) in header: {line!r}")
        head = "\r\n".join(lines).encode("latin-1")
        self._send(head + b"\r\n\r\n" + self._framed(chunk or b""))

    def write(self, chunk: bytes) -> None:
        self._send(self._framed(chunk))

    def finish(self) -> None:
        if self.chunked:
            self._send(b"0\r\n\r\n")
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(True)

    def close(self) -> None:
        self.stream.close()

    def _framed(self, chunk: bytes) -> bytes:
        if not self.chunked or not chunk:
            return chunk
        return b"%x\r\n%b\r\n" % (len(chunk), chunk)

    def _send(self, data: bytes) -> None:
        if data:
            self.last_write = self.stream.write(data)


def _unescape(arg: str | None) -> bytes | None:
    """A path argument as tornado's `PathMatches` gives it (percent-decoded bytes)."""
    return None if arg is None else url_unescape(arg, encoding=None, plus=False)
