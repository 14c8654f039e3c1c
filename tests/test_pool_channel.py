"""`Channel` over a real socketpair: S frames go to the callback, the R or E is returned."""

from __future__ import annotations

import asyncio
import socket

import pytest

from jupyter_serve.server.pool.channel import Channel, Disconnected
from jupyter_serve.wire import protocol
from jupyter_serve.wire.protocol import Frame, InferenceResult, Kind, StreamChunk


def chunk_frame(body: bytes) -> bytes:
    return protocol.encode(protocol.encode_chunk(StreamChunk([InferenceResult("r", body=body)])))


async def exchange_with(*answers: bytes, callback: bool = True) -> tuple[Frame, list[bytes]]:
    """Exchange one frame with a peer that wrote `answers` and closed; the chunk bodies seen."""
    left, right = socket.socketpair()
    seen: list[bytes] = []
    with right:
        channel = await Channel.open(left)
        right.sendall(b"".join(answers))
        right.shutdown(socket.SHUT_WR)  # and nothing more
        on_chunk = (lambda c: seen.extend(r.body for r in c.results)) if callback else None
        try:
            reply = await asyncio.wait_for(channel.exchange(b"request", on_chunk), 30)
        finally:
            await channel.close()
        assert right.recv(16) == b"request"
    return reply, seen


def test_stream_frames_reach_the_callback_in_order_before_the_answer() -> None:
    final = protocol.encode(protocol.encode_results([InferenceResult("r", body=b"z")]))
    reply, seen = asyncio.run(exchange_with(chunk_frame(b"x"), chunk_frame(b"y"), final))
    assert seen == [b"x", b"y"]
    assert reply.kind is Kind.RESULT
    assert protocol.decode_results(reply)[0].body == b"z"


def test_stream_frames_without_a_callback_are_dropped() -> None:
    error = protocol.encode(Frame(Kind.ERROR, {"status": 503}))
    reply, seen = asyncio.run(exchange_with(chunk_frame(b"x"), error, callback=False))
    assert (reply.kind, seen) == (Kind.ERROR, [])


@pytest.mark.parametrize(
    "answer",
    [
        protocol.encode(Frame(Kind.STREAM, {"results": "nonsense"})),  # a malformed S frame
        chunk_frame(b"x"),  # then the end of the stream
    ],
)
def test_garbage_or_eof_mid_stream_is_a_disconnect(answer: bytes) -> None:
    with pytest.raises(Disconnected):
        asyncio.run(exchange_with(answer))
