"""The serve lane's side of one client connection: `LaneProtocol` reads its requests and
sends the answers the fast path's `LaneWriter` (`fastpath.py`) gives it.

How the lane as a whole works (which requests it takes, handing a connection to tornado,
flow control) is told in `lane.py`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tornado import iostream

from jupyter_serve.server.http.admission import token_argument
from jupyter_serve.server.http.lane_http import (
    AskHub,
    HeadTooLarge,
    LaneRequest,
    NotForTheLane,
    RequestReader,
)
from jupyter_serve.wire.protocol import gathered

if TYPE_CHECKING:
    from jupyter_serve.server.http.lane import Lane

READ_SIZE = 65536

Target = Callable[[Any, list[str | None]], None]


Head = tuple[LaneRequest, int, Target, list[str | None]]


class LaneProtocol(asyncio.Protocol):
    """One client connection while the lane has it, and the connection the fast path's
    exchange writes its answer to (`send_head`, `write`, `finish`, `close`)."""

    def __init__(self, lane: Lane, sock: socket.socket, address: Any) -> None:
        self.lane = lane
        self.sock = sock
        self.address = address
        self.transport: asyncio.Transport | None = None
        self.reader = RequestReader()
        self.buffer = bytearray()
        self.head: Head | None = None  # a request whose body is still arriving
        self.parsed: tuple[LaneRequest, int] | None = None  # a head waiting to be routed
        self.request: LaneRequest | None = None  # the request being answered
        self.on_close: Callable[[], None] | None = None
        self.chunked = False
        self.reading = True
        self.writing = True  # False while the transport's write buffer is over its mark
        self.handing_over = False
        self.asking_hub = False  # a hub token's verdict is being learnt for the next request
        self.asked_hub = False  # ... and has been: admit it or hand over, ask no more
        self.loop = asyncio.get_running_loop()
        self.waiting_since: float | None = self.loop.time()  # for a head; None: busy
        self.idle_timer: asyncio.TimerHandle | None = None

    # ---- asyncio.Protocol ----

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.lane.connections.add(self)
        self.idle_timer = self.loop.call_later(self.lane.header_timeout, self._check_idle)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self._idle():
            self._next()
        if self.request is not None and len(self.buffer) > READ_SIZE:
            self._pause_reading()  # pipelined requests wait; so does their reading

    def connection_lost(self, exc: Exception | None) -> None:
        self.lane.connections.discard(self)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            on_close()

    def pause_writing(self) -> None:
        """The client does not read: stop reading and taking requests until it does."""
        self.writing = False
        self._pause_reading()

    def resume_writing(self) -> None:
        self.writing = True
        if self.handing_over:
            self._hand_over_now()
        elif self._idle():
            self._next()

    def _check_idle(self) -> None:
        """Close a connection that has waited `header_timeout` for a complete head, as
        tornado does (one timer per connection, re-armed lazily, nothing per request)."""
        if self.transport is None or self.transport.is_closing():
            return
        now = self.loop.time()
        since = now if self.waiting_since is None else self.waiting_since
        if now - since >= self.lane.header_timeout:
            self.transport.abort()
            return
        self.idle_timer = self.loop.call_later(since + self.lane.header_timeout - now,
                                               self._check_idle)  # fmt: skip

    # ---- reading requests ----

    def _idle(self) -> bool:
        return (self.request is None and not self.handing_over and self.writing
                and not self.asking_hub)  # fmt: skip

    def _next(self) -> None:
        """Start the next buffered request, wait for more bytes, or hand over."""
        try:
            head = self.head or self._read_head()
            if head is None:
                self._resume_reading()
                return
            request, body_start, target, args = head
            self.waiting_since = None  # a whole head came: the body may take its time
            end = body_start + request.content_length
            if len(self.buffer) < end:
                self.head = head  # the body is still arriving
                self._resume_reading()
                return
            with memoryview(self.buffer) as view, view[body_start:end] as body:
                if request.content_length:
                    self.reader.read_body(body)
                request.body = body  # for a form's fields, parsed (and kept) now
                if token_argument("", request.body_arguments):
                    raise NotForTheLane("a form's token field: jupyter_server reads it first")
                if request.malformed_form:
                    raise NotForTheLane("a form tornado refuses: its route answers it")
        except HeadTooLarge:
            if self.transport is not None:
                self.transport.close()  # as tornado does; answers written so far leave first
            return
        except NotForTheLane:
            self._hand_over()
            return
        except AskHub as asking:
            self._ask_hub(asking.answered)
            return
        self.head = None
        self.asked_hub = False
        request.body = memoryview(self._take(end))[body_start:end]
        self.request, self.chunked, self.on_close = request, False, None
        request.connection = self
        target(request, args)

    def _take(self, end: int) -> bytearray:
        """The buffer holding a request that ends at `end`, for the request to keep (its body
        is a view of it, not a copy); what follows the request goes on in a new buffer."""
        taken, self.buffer = self.buffer, self.buffer[end:]
        return taken

    def _read_head(self) -> Head | None:
        if self.parsed is None:  # else the head waited for the hub: parsed already
            buffer = self.buffer
            while buffer.startswith(b"\r\n"):  # tornado skips blank lines before a request
                del buffer[:2]
            end = self.reader.head_end(buffer)
            if end is None:
                return None
            self.parsed = (self.reader.read_head(bytes(buffer[:end])), end)
        request, end = self.parsed
        routed = self.lane.route(request, may_ask=not self.asked_hub)
        self.parsed = None
        return (request, end, *routed)

    def _ask_hub(self, answered: asyncio.Future[None]) -> None:
        """Wait, reading nothing, until the hub has answered; then take the request again."""
        self.asking_hub = True
        self.waiting_since = None  # a whole head came; the hub's answer may take its time
        self._pause_reading()
        answered.add_done_callback(self._hub_answered)

    def _hub_answered(self, _: asyncio.Future[None]) -> None:
        self.asking_hub, self.asked_hub = False, True
        if self.transport is not None and not self.transport.is_closing():
            self._next_if_idle()

    def _pause_reading(self) -> None:
        if self.reading and self.transport is not None and not self.transport.is_closing():
            self.reading = False
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self.writing and not self.reading and self.transport is not None \
                and not self.transport.is_closing():  # fmt: skip
            self.reading = True
            self.transport.resume_reading()

    # ---- handing the connection to tornado ----

    def _hand_over(self) -> None:
        """Give the connection to tornado once every answer written so far has left."""
        assert self.transport is not None
        self.handing_over = True
        self._pause_reading()
        if self.transport.get_write_buffer_size():
            self.writing = False
            self.transport.set_write_buffer_limits(high=0, low=0)  # resume_writing when empty
            return
        self._hand_over_now()

    def _hand_over_now(self) -> None:
        assert self.transport is not None
        if self.transport.is_closing():
            return
        self.lane.connections.discard(self)
        unread_bytes, self.buffer = bytes(self.buffer), bytearray()
        try:
            self.lane.hand_over(self.sock, self.address, unread_bytes)
        finally:
            self.transport.abort()  # closes the lane's descriptor; tornado has its own

    # ---- the HTTPConnection side, as tornado's HTTP1Connection writes a response ----

    def set_close_callback(self, callback: Callable[[], None] | None) -> None:
        self.on_close = callback

    def send_head(self, code: int, reason: str, fields: Mapping[str, Any], body: bytes,
                  *, whole: bool) -> None:  # fmt: skip
        """An answer's head and `body`: the whole answer (its `Content-Length` among
        `fields`), then `finish`; or, not `whole`, the start of a streamed one (chunked
        unless `fields` give a length), whose later chunks `write` sends. A field with a CR
        or LF is refused (`ValueError`) before anything is sent."""
        assert self.request is not None
        self.chunked = not whole and code not in (204, 304) and code >= 200 \
            and "Content-Length" not in fields  # fmt: skip
        lines = [
            f"HTTP/1.1 {code} {reason}",
            *(f"{name}: {value}" for name, value in fields.items()),
        ]
        if self.request.close_after:
            lines.append("Connection: close")
        if self.chunked:
            lines.append("Transfer-Encoding: chunked")
        head = "\r\n".join(lines)
        if head.count("\n") != len(lines) - 1 or head.count("\r") != len(lines) - 1:
            raise ValueError(f"Illegal characters (CR or LF) in header: {head!r}")
        self._send(head.encode("latin-1") + b"\r\n\r\n", *self._framed(body))
        if whole:
            self.finish()

    def write(self, chunk: bytes) -> None:
        self._send(*self._framed(chunk))

    def finish(self) -> None:
        """The answer is complete: close if asked to, else go on with the next request."""
        if self.chunked:
            self._send(b"0\r\n\r\n")
        request, self.request = self.request, None
        self.waiting_since = self.loop.time()
        if self.transport is None or self.transport.is_closing():
            return
        if request is not None and request.close_after:
            self.transport.close()  # after the answer has left
        elif self.buffer:
            self.loop.call_soon(self._next_if_idle)
        else:
            self._resume_reading()

    def close(self) -> None:
        """Cut the connection now (a streamed answer that failed; an answer that broke)."""
        self.abort()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _next_if_idle(self) -> None:
        if self._idle():
            self._next()

    def _framed(self, chunk: bytes) -> tuple[bytes, ...]:
        if not self.chunked or not chunk:
            return (chunk,)
        return (b"%x\r\n" % len(chunk), chunk, b"\r\n")

    def _send(self, *parts: bytes) -> None:
        """Write `parts`: a large body as it is, small pieces joined (`protocol.gathered`)."""
        if not any(parts):
            return
        if self.transport is None or self.transport.is_closing():
            raise iostream.StreamClosedError()  # the exchange expects tornado's error
        for data in gathered(parts):
            self.transport.write(data)
