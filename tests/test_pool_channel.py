"""`Channel` over a real socketpair: S frames go to the callback, the R or E is returned;
its `FrameReader` delivers every frame intact, however the bytes arrive."""

from __future__ import annotations

import asyncio
import random
import socket
import threading

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
            reply = await asyncio.wait_for(channel.exchange([b"req", b"uest"], on_chunk), 30)
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


def result_frames(sizes: list[int]) -> list[bytes]:
    rng = random.Random(len(sizes))
    return [
        protocol.encode(protocol.encode_results([InferenceResult(str(i), body=rng.randbytes(n))]))
        for i, n in enumerate(sizes)
    ]


async def read_all(wire: bytes, count: int, piece_sizes: list[int]) -> list[Frame]:
    """`count` frames read by a `Channel` while a thread writes `wire` in pieces."""
    left, right = socket.socketpair()

    def write() -> None:
        offset, pieces = 0, iter(piece_sizes)
        while offset < len(wire):
            piece = next(pieces, 65536)
            right.sendall(wire[offset : offset + piece])
            offset += piece
        right.shutdown(socket.SHUT_WR)

    with right:
        channel = await Channel.open(left)
        writer = threading.Thread(target=write)
        writer.start()
        try:
            frames = [await asyncio.wait_for(channel.read_frame(), 30) for _ in range(count)]
            with pytest.raises(Disconnected):
                await asyncio.wait_for(channel.read_frame(), 30)
            assert channel.at_eof()
        finally:
            writer.join()
            await channel.close()
    return frames


@pytest.mark.parametrize("seed", range(3))
def test_every_frame_arrives_intact_however_the_bytes_are_cut(seed: int) -> None:
    """Small frames share read buffers, frames cut by a buffer's end move, large ones
    (past the buffer) get their own: each frame stays intact after all were read."""
    rng = random.Random(seed)
    sizes = [rng.choice([0, 1, 900, 40_000, 65_000, 70_000, 300_000]) for _ in range(60)]
    wires = result_frames(sizes)
    pieces = [rng.choice([1, 3, 4096, 50_000, 200_000]) for _ in range(5000)]
    frames = asyncio.run(read_all(b"".join(wires), len(wires), pieces))
    assert [protocol.encode(f) for f in frames] == wires  # none overwritten since it came


def test_a_truncated_frame_at_the_end_of_the_stream_is_a_disconnect() -> None:
    wire = result_frames([10, 100_000])
    truncated = wire[0] + wire[1][:-5]
    with pytest.raises(Disconnected):
        asyncio.run(read_all(truncated, 2, []))
