"""`Channel`: the server's end of one worker's socket: send a frame, await its answer.

A worker answers each `L` or `I` frame with one `R` or `E` frame. While a batch
runs, a streaming handler makes the worker send any number of `S` frames first
(jupyter_serve.wire.protocol); `exchange` hands each one, decoded, to its `on_chunk`
callback as it arrives and returns the final frame. Without a callback, `S`
frames are read and dropped. A non-streaming answer costs no extra await.

A closed socket, a truncated frame or a malformed one raises `Disconnected`: the
worker is gone or cannot be trusted any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

from jupyter_serve.server.pool.logs import LOGGER
from jupyter_serve.wire import protocol
from jupyter_serve.wire.protocol import Frame, Kind, StreamChunk

__all__ = ["Channel", "ChunkCallback", "Disconnected"]

ChunkCallback = Callable[[StreamChunk], None]


class Disconnected(Exception):
    """The socket closed or carried garbage: the worker is gone or cannot be trusted."""


class Channel:
    """A connected stream socket to one worker, speaking jupyter_serve.wire.protocol."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, sock: socket.socket) -> Channel:
        """Wrap the server's end of the worker's socketpair."""
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return cls(reader, writer)

    def at_eof(self) -> bool:
        return self._reader.at_eof()

    async def exchange(self, data: bytes, on_chunk: ChunkCallback | None = None) -> Frame:
        """Send one encoded frame; return the worker's R or E after passing S frames on."""
        try:
            self._writer.write(data)
            await self._writer.drain()
        except OSError as exc:
            raise Disconnected(str(exc)) from exc
        reply = await self.read_frame()
        while reply.kind is Kind.STREAM:
            try:
                _pass_chunk(reply, on_chunk)
            except protocol.ProtocolError as exc:
                raise Disconnected(str(exc)) from exc
            reply = await self.read_frame()
        return reply

    async def read_frame(self) -> Frame:
        """The next frame the worker sends, whatever its kind."""
        try:
            frame = await protocol.read_frame(self._reader)
        except (OSError, protocol.ProtocolError) as exc:
            raise Disconnected(str(exc)) from exc
        if frame is None:
            raise Disconnected("end of stream")
        return frame

    async def close(self) -> None:
        if self._writer.is_closing():
            return
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


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
