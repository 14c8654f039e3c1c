"""`Channel`: the server's end of one worker's socket: send a frame, await its answer.

A worker answers each `L` or `I` frame with one `R` or `E` frame. While a batch
runs, a streaming handler makes the worker send any number of `S` frames first
(jupyter_serve.wire.protocol); `exchange` hands each one, decoded, to its `on_chunk`
callback as it arrives and returns the final frame. Without a callback, `S`
frames are read and dropped. A non-streaming answer costs no extra await. A continuous
batch the worker steps on its own (protocol: the "steps" command) is one exchange too:
each step's `T` frame goes to `on_step`, and `send` writes the run's control frames.

Bodies are not copied on the way (`FrameReader`): a frame is received straight into
memory it keeps (a shared read buffer for small frames, its own buffer for a large
one), and the decoded frame's payload is a view of it. Sent frames go as parts
(`protocol.gathered`): a large body is written from the caller's own buffer.

A closed socket, a truncated frame or a malformed one raises `Disconnected`: the
worker is gone or cannot be trusted any more.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from jupyter_serve.server.pool.logs import LOGGER
from jupyter_serve.wire import protocol
from jupyter_serve.wire.protocol import Buffer, Frame, Kind, StreamChunk

__all__ = ["Channel", "ChunkCallback", "Disconnected", "FrameReader", "StepCallback"]

ChunkCallback = Callable[[StreamChunk], None]
StepCallback = Callable[[Frame], None]
_ON_THE_WAY = (Kind.STREAM, Kind.STEP)  # frames before an exchange's answer

READ_BUFFER = 65536  # small frames are received into shared buffers of this size
MIN_READ = 4096  # a read buffer with less room than this is replaced
MAX_QUEUED = 8  # frames read ahead of the consumer before reading pauses
_LENGTH = struct.Struct("!I")


class Disconnected(Exception):
    """The socket closed or carried garbage: the worker is gone or cannot be trusted."""


class FrameReader(asyncio.BufferedProtocol):
    """Receives frames with `recv_into` straight into memory the frames keep.

    Small frames land in a shared read buffer that is never written twice: once full, a
    fresh one takes over (a frame cut by its end moves to it, once), so a frame handed
    out stays valid for as long as it is used. A frame larger than the buffer gets a
    buffer of its own, into which the rest of it is received directly.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.frames: deque[Frame] = deque()
        self.failure: Disconnected | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.drained: asyncio.Future[None] | None = None  # set while writing is paused
        self.buffer = bytearray(READ_BUFFER)
        self.start = self.end = 0  # the unread bytes of `buffer`
        self.large: bytearray | None = None  # a large frame's own buffer, being filled
        self.filled = 0
        self.paused = False

    # ---- asyncio.BufferedProtocol ----

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.large is not None:
            return memoryview(self.large)[self.filled :]
        if len(self.buffer) - self.end < MIN_READ:  # full: a fresh one, a cut frame moved to it
            fresh = bytearray(READ_BUFFER)
            fresh[: self.end - self.start] = self.buffer[self.start : self.end]
            self.buffer, self.start, self.end = fresh, 0, self.end - self.start
        return memoryview(self.buffer)[self.end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self.large is not None:
            self.filled += nbytes
            if self.filled == len(self.large):
                large, self.large = self.large, None
                self._deliver(large)
            return
        self.end += nbytes
        self._split()

    def eof_received(self) -> bool:
        self._fail(Disconnected("end of stream"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(Disconnected(str(exc) if exc else "end of stream"))
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def pause_writing(self) -> None:
        self.drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        self.drained = None

    # ---- frames ----

    def _split(self) -> None:
        """Deliver each whole frame in the read buffer; start a large frame's own buffer."""
        view = memoryview(self.buffer)
        while self.end - self.start >= _LENGTH.size and self.failure is None:
            (length,) = _LENGTH.unpack_from(view, self.start)
            begin = self.start + _LENGTH.size
            if length > len(self.buffer) - _LENGTH.size:  # will never fit: its own buffer
                self.large = bytearray(length)
                self.filled = min(length, self.end - begin)
                self.large[: self.filled] = view[begin : begin + self.filled]
                self.start = self.end = len(self.buffer)  # what follows: a fresh buffer
                if self.filled == length:
                    large, self.large = self.large, None
                    self._deliver(large)
                return
            if self.end - begin < length:
                return  # the rest is still to come
            self.start = begin + length
            self._deliver(view[begin : self.start])

    def _deliver(self, body: Buffer) -> None:
        try:
            frame = protocol.decode(body)
        except protocol.ProtocolError as exc:
            self._fail(Disconnected(str(exc)))
            if self.transport is not None:
                self.transport.abort()
            return
        self.frames.append(frame)
        if len(self.frames) >= MAX_QUEUED and self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def _fail(self, failure: Disconnected) -> None:
        if self.failure is None:
            self.failure = failure
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def next_frame(self) -> Frame:
        """The next frame, in order; `Disconnected` once none can come."""
        while not self.frames:
            if self.failure is not None:
                raise self.failure
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        frame = self.frames.popleft()
        if self.paused and len(self.frames) < MAX_QUEUED // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return frame


class Channel:
    """A connected stream socket to one worker, speaking jupyter_serve.wire.protocol."""

    def __init__(self, transport: asyncio.Transport, reader: FrameReader) -> None:
        self._transport = transport
        self._reader = reader

    @classmethod
    async def open(cls, sock: socket.socket) -> Channel:
        """Wrap the server's end of the worker's socketpair."""
        loop = asyncio.get_running_loop()
        transport, reader = await loop.create_unix_connection(FrameReader, sock=sock)
        assert isinstance(transport, asyncio.Transport)
        return cls(transport, reader)

    def at_eof(self) -> bool:
        return self._reader.failure is not None and not self._reader.frames

    async def exchange(
        self, parts: Sequence[Buffer], on_chunk: ChunkCallback | None = None
    ) -> Frame:
        """Send one frame (`protocol.frame_parts`); return the worker's R or E after passing
        S frames on."""
        return await self.begin_exchange(parts, on_chunk)

    def begin_exchange(
        self,
        parts: Sequence[Buffer],
        on_chunk: ChunkCallback | None = None,
        on_step: StepCallback | None = None,
    ) -> Coroutine[Any, Any, Frame]:
        """Write one frame now, before returning; the coroutine waits while the worker's
        socket is full, passes S frames to `on_chunk` and T frames (a "steps" run's steps)
        to `on_step`, and returns the R or E (`Disconnected` if the socket is closed)."""
        if self._transport.is_closing():
            return self._answer(Disconnected("the socket is closed"), on_chunk, on_step)
        self.send(parts)
        return self._answer(self._reader.drained, on_chunk, on_step)

    def send(self, parts: Sequence[Buffer]) -> None:
        """Write one frame, answered by none of its own (a "steps" run's join, leave or end);
        nothing if the socket is closing (the exchange in flight learns why)."""
        if self._transport.is_closing():
            return
        for part in protocol.gathered(parts):
            self._transport.write(part)

    async def _answer(
        self,
        drained: asyncio.Future[None] | Disconnected | None,
        on_chunk: ChunkCallback | None,
        on_step: StepCallback | None,
    ) -> Frame:
        if isinstance(drained, Disconnected):
            raise drained
        if drained is not None:
            await drained  # a lost connection shows in `read_frame`, after any answer it sent
        reply = await self.read_frame()
        while reply.kind in _ON_THE_WAY:
            try:
                if reply.kind is Kind.STREAM:
                    _pass_chunk(reply, on_chunk)
                else:
                    _pass_step(reply, on_step)
            except protocol.ProtocolError as exc:
                raise Disconnected(str(exc)) from exc
            reply = await self.read_frame()
        return reply

    async def read_frame(self) -> Frame:
        """The next frame the worker sends, whatever its kind."""
        return await self._reader.next_frame()

    async def close(self) -> None:
        if self._transport.is_closing():
            return
        self._transport.close()


def _pass_step(frame: Frame, on_step: StepCallback | None) -> None:
    if on_step is None:
        raise protocol.ProtocolError("A step frame outside a steps run")
    try:
        on_step(frame)
    except Exception:  # a consumer's bug must not leave the run's frames unread
        LOGGER.exception("Passing on a step failed")


def _pass_chunk(frame: Frame, on_chunk: ChunkCallback | None) -> None:
    try:
        chunk = protocol.decode_chunk(frame)
    except (KeyError, TypeError, ValueError) as exc:
        raise protocol.ProtocolError(f"Malformed stream frame: {exc!r}") from exc
    if on_chunk is None:
        return
    try:
        on_chunk(chunk)
    except Exception:  # a consumer's bug must not leave the batch's frames unread
        LOGGER.exception("Passing on a streamed chunk failed")
