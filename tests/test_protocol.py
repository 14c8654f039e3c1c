"""Round trips of the worker wire protocol over real sockets and stream readers."""

from __future__ import annotations

import asyncio
import socket

import pytest

from jupyter_serve.wire import protocol
from jupyter_serve.wire.protocol import (
    Frame,
    InferenceRequest,
    InferenceResult,
    Kind,
    Parameter,
    ProtocolError,
)


def test_encode_decode_round_trip_keeps_header_and_payload() -> None:
    frame = Frame(Kind.LOAD, {"model_name": "m", "gpu_id": None}, b"\x00\xffraw")
    wire = protocol.encode(frame)
    assert protocol.decode(wire[4:]) == frame


def test_sync_socketpair_round_trip_with_large_payload() -> None:
    left, right = socket.socketpair()
    frame = Frame(Kind.RESULT, {"n": 1}, bytes(range(256)) * 8192)  # 2 MiB
    with left, right:
        reader_result: list[Frame | None] = []
        import threading

        reader = threading.Thread(
            target=lambda: reader_result.append(protocol.read_frame_sync(right))
        )
        reader.start()
        protocol.write_frame_sync(left, frame)
        reader.join()
        assert reader_result == [frame]
        left.close()
        assert protocol.read_frame_sync(right) is None  # clean EOF


def test_sync_read_of_truncated_frame_raises() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(protocol.encode(Frame(Kind.LOAD, {"a": 1}))[:-2])
        left.close()
        with pytest.raises(ProtocolError, match="inside a frame"):
            protocol.read_frame_sync(right)


def test_async_reader_round_trip_and_eof() -> None:
    async def run() -> list[Frame | None]:
        reader = asyncio.StreamReader()
        reader.feed_data(protocol.encode(Frame(Kind.ERROR, {"status": 507})))
        reader.feed_data(protocol.encode(Frame(Kind.INFER, {"requests": []}, b"xy")))
        reader.feed_eof()
        return [await protocol.read_frame(reader) for _ in range(3)]

    first, second, end = asyncio.run(run())
    assert first == Frame(Kind.ERROR, {"status": 507})
    assert second == Frame(Kind.INFER, {"requests": []}, b"xy")
    assert end is None


def test_async_reader_truncated_frame_raises() -> None:
    async def run() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(protocol.encode(Frame(Kind.LOAD, {"a": 1}))[:7])
        reader.feed_eof()
        await protocol.read_frame(reader)

    with pytest.raises(ProtocolError):
        asyncio.run(run())


@pytest.mark.parametrize(
    "body",
    [b"\x01", b"\x00\x00\x00\x00\x09", b"Z\x00\x00\x00\x02{}", b"L\x00\x00\x00\x02[]"],
)
def test_decode_rejects_malformed_frames(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        protocol.decode(body)


def test_infer_batch_round_trip() -> None:
    batch = [
        InferenceRequest(
            "r1",
            {"content-type": "application/json"},
            (Parameter("body", "application/json", b'{"x": 1}'),),
        ),
        InferenceRequest(
            "r2",
            {},
            (Parameter("data", "image/png", b"\x89PNG"), Parameter("k", "text/plain", b"v")),
        ),
    ]
    frame = protocol.decode(protocol.encode(protocol.encode_infer(batch, "describe"))[4:])
    assert frame.kind is Kind.INFER
    assert protocol.decode_infer(frame) == (batch, "describe")


def test_batch_bytes_are_the_frame_encode_gives_bodies_of_any_buffer_type() -> None:
    big = bytearray(b"\x01" * 300_000)  # the serve lane's large bodies are bytearrays
    batch = [
        InferenceRequest("r1", {}, (Parameter("body", "", big),)),
        InferenceRequest("r2", {}, (Parameter("body", "", memoryview(b"view")),)),
    ]
    wire = protocol.encode_infer_bytes(batch)
    assert wire == protocol.encode(protocol.encode_infer(batch))
    requests, _ = protocol.decode_infer(protocol.decode(wire[4:]))
    assert [r.parameters[0].value for r in requests] == [bytes(big), b"view"]


def test_results_round_trip_with_extra_header_fields() -> None:
    results = [
        InferenceResult("r1", 200, b"ok", "text/plain", "", {"dummy": "1"}),
        InferenceResult("r2", 507, b"Invalid response", None, "Insufficient Storage"),
    ]
    frame = protocol.encode_results(results, predict_ms=1.5)
    decoded = protocol.decode(protocol.encode(frame)[4:])
    assert decoded.header["predict_ms"] == 1.5
    assert protocol.decode_results(decoded) == results


def test_stream_chunk_round_trip_keeps_status_message_and_results() -> None:
    results = [
        InferenceResult("r1", 200, b"hello ", "text/plain", "", {"ts_stream_next": "true"}),
        InferenceResult("r2", 200, b"\x00\xff"),
    ]
    chunk = protocol.StreamChunk(results, 200, "Intermediate Prediction success")
    frame = protocol.decode(protocol.encode(protocol.encode_chunk(chunk))[4:])
    assert frame.kind is Kind.STREAM
    assert protocol.decode_chunk(frame) == chunk


def test_stream_frames_come_before_the_result_on_one_reader() -> None:
    async def run() -> list[Frame | None]:
        reader = asyncio.StreamReader()
        for word in (b"a", b"b"):
            chunk = protocol.StreamChunk([InferenceResult("r1", body=word)])
            reader.feed_data(protocol.encode(protocol.encode_chunk(chunk)))
        reader.feed_data(protocol.encode(protocol.encode_results([InferenceResult("r1")])))
        reader.feed_eof()
        return [await protocol.read_frame(reader) for _ in range(4)]

    frames = asyncio.run(run())
    assert [f.kind for f in frames if f is not None] == [Kind.STREAM, Kind.STREAM, Kind.RESULT]
    assert frames[-1] is None
    bodies = [protocol.decode_chunk(f).results[0].body for f in frames[:2] if f is not None]
    assert bodies == [b"a", b"b"]


def test_blob_reference_outside_payload_is_refused() -> None:
    with pytest.raises(ProtocolError, match="outside"):
        protocol.blob(b"abc", [2, 5])
