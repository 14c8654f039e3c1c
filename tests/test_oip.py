"""Tests for jupyter_serve.wire.oip: v2 tensors and the binary tensor extension's encoding."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from jupyter_serve.wire.oip import (
    CHUNK,
    BinaryDataError,
    binary_response,
    decode_elements,
    element_count,
    encode_elements,
    read_binary_request,
    read_elements,
    split_binary_request,
    wants_binary,
)

NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}  # fmt: skip


@pytest.mark.parametrize("datatype", sorted(NUMPY))
def test_fixed_size_elements_decode_as_numpy_writes_them(datatype: str) -> None:
    array = np.array([0, 1, 3, 7], dtype=NUMPY[datatype])
    decoded = decode_elements(datatype, array.tobytes())
    assert decoded == array.tolist()
    assert encode_elements(datatype, decoded) == array.tobytes()


@pytest.mark.parametrize("datatype", sorted(NUMPY))
def test_elements_are_counted_without_decoding_and_read_a_slice_at_a_time(datatype: str) -> None:
    array = (np.arange(CHUNK + 5) % 100).astype(NUMPY[datatype])
    raw = memoryview(array.tobytes())
    assert element_count(datatype, raw) == CHUNK + 5
    assert read_elements(datatype, raw, CHUNK - 2, 4) == array[CHUNK - 2 : CHUNK + 2].tolist()
    assert encode_elements(datatype, array.tolist()) == array.tobytes()  # packed by CHUNKs


def test_bf16_is_the_top_half_of_fp32() -> None:
    halves = np.array([1.5, -2.0, 0.25], dtype=np.float32).view(np.uint32) >> 16
    raw = halves.astype(np.uint16).tobytes()
    assert decode_elements("BF16", raw) == [1.5, -2.0, 0.25]
    assert (element_count("BF16", raw), read_elements("BF16", raw, 1, 2)) == (3, [-2.0, 0.25])
    assert encode_elements("BF16", [1.5, -2.0, 0.25]) == raw  # a bfloat16 output's values


def test_bytes_elements_match_tritonclients_serialization() -> None:
    array = np.array([b"one", b"", "tr\u00e8s".encode()], dtype=np.object_)
    raw = serialize_byte_tensor(array).item()
    assert decode_elements("BYTES", raw) == [b"one", b"", "tr\u00e8s".encode()]
    assert deserialize_bytes_tensor(encode_elements("BYTES", ["a", b"\xff"])).tolist() == [
        b"a", b"\xff"
    ]  # fmt: skip


def request_body(header: dict[str, Any], *data: bytes) -> tuple[bytes, str]:
    text = json.dumps(header).encode()
    return text + b"".join(data), str(len(text))


def test_binary_inputs_take_their_data_in_order_and_json_inputs_keep_theirs() -> None:
    floats = np.array([1.0, 2.5], dtype=np.float32).tobytes()
    words = serialize_byte_tensor(np.array([b"hi"], dtype=np.object_)).item()
    header = {"inputs": [
        {"name": "a", "shape": [2], "datatype": "FP32",
         "parameters": {"binary_data_size": len(floats)}},
        {"name": "b", "shape": [1], "datatype": "INT64", "data": [4]},
        {"name": "c", "shape": [1], "datatype": "BYTES",
         "parameters": {"binary_data_size": len(words)}},
    ]}  # fmt: skip
    request = read_binary_request(*request_body(header, floats, words))
    assert [tensor["data"] for tensor in request["inputs"]] == [[1.0, 2.5], [4], [b"hi"]]
    split, raw = split_binary_request(*request_body(header, floats, words))
    assert [bytes(raw[0]), bytes(raw[2])] == [floats, words]  # by input index, undecoded
    assert all("data" not in split["inputs"][i] for i in raw)
    assert (element_count("FP32", raw[0]), element_count("BYTES", raw[2])) == (2, 1)


@pytest.mark.parametrize(
    ("header", "data", "length", "message"),
    [
        ({"inputs": []}, b"", "x", "between 0 and the body's length"),
        ({"inputs": []}, b"", "9999", "between 0 and the body's length"),
        ({"inputs": []}, b"extra", None, "5 bytes of binary data belong to no input"),
        ({"inputs": [{"datatype": "FP32", "parameters": {"binary_data_size": 8}}]}, b"1234",
         None, "runs past the body"),
        ({"inputs": [{"datatype": "FP32", "parameters": {"binary_data_size": 3}}]}, b"123",
         None, "no whole number of FP32"),
        ({"inputs": [{"datatype": "COMPLEX", "parameters": {"binary_data_size": 1}}]}, b"1",
         None, "'COMPLEX' is not supported"),
        ({"inputs": [{"datatype": "BYTES", "parameters": {"binary_data_size": 5}}]},
         b"\x09\x00\x00\x00a", None, "runs past"),
        ({"inputs": [{"datatype": "FP32", "parameters": {"binary_data_size": -1}}]}, b"",
         None, "must be a size"),
        ({"inputs": [{"datatype": "FP32", "parameters": []}]}, b"", None, "parameters are an"),
        ({"inputs": "no"}, b"", None, 'an "inputs" list'),
    ],
)  # fmt: skip
def test_mismatched_binary_data_is_refused(
    header: dict[str, Any], data: bytes, length: str | None, message: str
) -> None:
    body, own_length = request_body(header, data)
    with pytest.raises(BinaryDataError, match=message):
        read_binary_request(body, length or own_length)


def test_outputs_go_binary_only_when_asked() -> None:
    outputs = [{"name": "x", "shape": [2], "datatype": "INT64", "data": [1, 2]}]
    assert not wants_binary({}, "x")
    assert wants_binary({"parameters": {"binary_data_output": True}}, "x")
    asked = {"outputs": [{"name": "x", "parameters": {"binary_data": True}}]}
    assert wants_binary(asked, "x")
    assert not wants_binary(asked, "y")
    body, length = binary_response({"outputs": [dict(o) for o in outputs]}, {})
    assert (json.loads(body), length) == ({"outputs": outputs}, None)
    body, length = binary_response({"outputs": [dict(o) for o in outputs]}, asked)
    assert length is not None
    header = json.loads(body[:length])
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 16}
    assert "data" not in header["outputs"][0]
    assert struct.unpack("<2q", body[length:]) == (1, 2)
