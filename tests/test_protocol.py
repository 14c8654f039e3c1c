"""Round trips of the worker wire protocol over real sockets (the server's asynchronous
reader: tests/test_pool_channel.py)."""

from __future__ import annotations

import socket
import threading

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


def test_batch_parts_are_the_frame_encode_gives_with_the_bodies_themselves() -> None:
    big = bytearray(b"\x01" * 300_000)
    lane_body = memoryview(bytearray(b"head-of-buffer|view"))[15:]  # the lane's: a view
    batch = [
        InferenceRequest("r1", {}, (Parameter("body", "", big),)),
        InferenceRequest("r2", {}, (Parameter("body", "", lane_body),)),
    ]
    parts = protocol.encode_infer_parts(batch)
    wire = b"".join(parts)
    assert wire == protocol.encode(protocol.encode_infer(batch))
    assert any(part is big for part in parts)  # sent from the body's own memory
    assert any(isinstance(p, memoryview) and p.obj is lane_body.obj for p in parts)
    requests, _ = protocol.decode_infer(protocol.decode(wire[4:]))
    assert [r.parameters[0].value for r in requests] == [bytes(big), b"view"]


def test_a_decoded_payload_and_its_bodies_are_views_of_the_bytes_read() -> None:
    batch = [InferenceRequest("r1", {}, (Parameter("body", "", b"abc"),))]
    read = bytearray(protocol.encode(protocol.encode_infer(batch))[4:])
    frame = protocol.decode(read)
    value = protocol.decode_infer(frame)[0][0].parameters[0].value
    assert isinstance(value, memoryview)
    assert value.obj is read
    assert value == b"abc"


def test_gathered_joins_runs_of_small_parts_and_keeps_large_ones() -> None:
    large = b"L" * protocol.SMALL_PART
    parts = protocol.gathered([b"a", b"b", large, b"c", b"", b"d"])
    assert parts == [b"ab", large, b"cd"]
    assert parts[1] is large


def test_send_parts_sync_sends_every_part_in_order_across_partial_sends() -> None:
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # many partial sendmsg calls
    parts = [b"", b"x" * 70_000, memoryview(bytes(range(256)) * 300)[7:], b"tail", *[b"."] * 600]
    received = bytearray()
    expected = b"".join(parts)

    def read() -> None:
        while len(received) < len(expected):
            received.extend(right.recv(65536))

    with left, right:
        reader = threading.Thread(target=read)
        reader.start()
        protocol.send_parts_sync(left, parts)
        reader.join()
    assert received == expected


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


def test_blob_reference_outside_payload_is_refused() -> None:
    with pytest.raises(ProtocolError, match="outside"):
        protocol.blob(b"abc", [2, 5])
