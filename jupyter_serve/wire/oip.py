"""Open Inference Protocol (KServe v2) tensor helpers, shared by both sides.

Stdlib only: the server's KServe routes (`server/http/kserve.py`) and the workers'
`kservev2` request envelope (`handlers/envelopes.py`) both turn handler outputs
into v2 tensors with these.

The binary tensor extension (Triton's `binary_data` HTTP extension, which KServe's
Python server also speaks, and `tritonclient.http` uses by default): a request
whose `Inference-Header-Content-Length` header says how many bytes of the body are
its JSON carries the data of inputs with a `binary_data_size` parameter after it,
in input order, little-endian; BYTES elements are each a 4-byte length and the
bytes. Outputs go binary when the request asks (`binary_data_output: true` in its
parameters, or `binary_data: true` in a requested output's), the same way round.

A binary request is read in two steps (worker/kserve_codec.py): `split_binary_request`
checks the sizes and `element_count` counts the elements without building any, so the
worker can refuse too many before `read_elements` decodes them a slice at a time.
`read_binary_request` and `decode_elements` do both at once.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any


def flatten(value: Any) -> list[Any]:
    """The leaves of nested lists (or tuples), in order; iterative, so any nesting a
    client sends costs time in its size, never a RecursionError."""
    leaves: list[Any] = []
    stack = [iter((value,))]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list | tuple):
                stack.append(iter(item))
                break
            leaves.append(item)
        else:
            stack.pop()
    return leaves


def datatype(values: list[Any]) -> str:
    """The v2 datatype numpy would infer for these values."""
    if any(isinstance(v, str) for v in values):
        return "BYTES"
    if values and all(isinstance(v, bool) for v in values):
        return "BOOL"
    if values and all(isinstance(v, int) for v in values):
        return "INT64"
    return "FP64"


def typed_data(values: list[Any]) -> tuple[str, list[Any]]:
    """(datatype, data) of a tensor's flattened values, as the Open Inference Protocol has
    them: numbers and booleans as they are; anything else (a handler's dicts, None,
    strings) makes a BYTES tensor whose elements are strings (JSON for non-strings)."""
    scalar = all(isinstance(v, int | float) for v in values)
    if scalar:
        return datatype(values), values
    return "BYTES", [v if isinstance(v, str) else json.dumps(v) for v in values]


# ---- the binary tensor extension (Triton's and KServe's HTTP/REST binary data) ----

BINARY_HEADER = "Inference-Header-Content-Length"
BINARY_TYPE = "application/octet-stream"
# little-endian struct formats of the fixed-size datatypes (BF16: the top half of an FP32)
ELEMENT_FORMATS = {
    "BOOL": "?", "UINT8": "B", "UINT16": "H", "UINT32": "I", "UINT64": "Q", "INT8": "b",
    "INT16": "h", "INT32": "i", "INT64": "q", "FP16": "e", "FP32": "f", "FP64": "d", "BF16": "H",
}  # fmt: skip
CHUNK = 16384  # the most elements one struct call packs or one block of JSON holds
DEFAULT_MAX_TENSOR_ELEMENTS = 2**22
"""The server's default cap on one request's tensor elements and nesting lists
(`max_tensor_elements`): any FP32 image batch a default `max_request_size` body holds,
NCHW or NHWC (10 224x224x3 images: 2M), while 1-byte datatypes stop at 4M elements."""


class BinaryDataError(ValueError):
    """A request's binary tensor data does not match its JSON header."""


def read_binary_request(body: bytes, header_length: str) -> dict[str, Any]:
    """The inference request of a body whose first `header_length` bytes are its JSON and
    the rest the data of the inputs with a `binary_data_size` parameter, in input order.

    Those inputs get their elements as `data`: numbers (booleans) for fixed-size
    datatypes, `bytes` for BYTES (each element is a 4-byte little-endian length, then
    that many bytes). Raises `BinaryDataError` (or `ValueError`) for any mismatch.
    """
    request, raw = split_binary_request(body, header_length)
    for index, data in raw.items():
        tensor = request["inputs"][index]
        tensor["data"] = decode_elements(str(tensor.get("datatype")), data)
    return request


def split_binary_request(
    body: bytes, header_length: str
) -> tuple[dict[str, Any], dict[int, memoryview]]:
    """The JSON header of a binary request (`read_binary_request`), and the binary data of
    its inputs by input index, undecoded: the sizes are checked, no element is built."""
    size = int(header_length.strip()) if header_length.strip().isdigit() else -1
    if not 0 <= size <= len(body):
        raise BinaryDataError(f"{BINARY_HEADER} must be between 0 and the body's length.")
    request = json.loads(body[:size])
    if not isinstance(request, dict) or not isinstance(request.get("inputs"), list):
        raise BinaryDataError('The JSON header must be an object with an "inputs" list.')
    data, offset = memoryview(body)[size:], 0
    raw: dict[int, memoryview] = {}
    for index, tensor in enumerate(request["inputs"]):
        length = _binary_size(tensor)
        if length is None:
            continue
        if offset + length > len(data):
            raise BinaryDataError(
                f"Input {tensor.get('name')}: binary_data_size runs past the body."
            )
        raw[index] = data[offset : offset + length]
        offset += length
    if offset != len(data):
        raise BinaryDataError(f"{len(data) - offset} bytes of binary data belong to no input.")
    return request, raw


def _binary_size(tensor: Any) -> int | None:
    """An input's `binary_data_size` parameter: None without one, else a size in bytes."""
    params = tensor.get("parameters", {}) if isinstance(tensor, dict) else None
    params = {} if params is None and isinstance(tensor, dict) else params
    if not isinstance(params, dict):
        raise BinaryDataError("Each input must be an object whose parameters are an object.")
    if "binary_data_size" not in params:
        return None
    size = params["binary_data_size"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise BinaryDataError(f"Input {tensor.get('name')}: binary_data_size must be a size.")
    return size


def element_count(datatype: str, raw: memoryview | bytes) -> int:
    """How many elements a tensor's binary data holds, found without building any."""
    if datatype == "BYTES":
        return sum(1 for _ in bytes_spans(raw))
    width = _width(datatype)
    if len(raw) % width:
        raise BinaryDataError(f"{len(raw)} bytes are no whole number of {datatype} elements.")
    return len(raw) // width


def decode_elements(datatype: str, raw: memoryview | bytes) -> list[Any]:
    """The elements of a tensor's binary data (see `read_binary_request`)."""
    if datatype == "BYTES":
        return [bytes(raw[start : start + length]) for start, length in bytes_spans(raw)]
    return read_elements(datatype, raw, 0, element_count(datatype, raw))


def read_elements(datatype: str, raw: memoryview | bytes, start: int, count: int) -> list[Any]:
    """`count` elements of a fixed-size datatype's binary data, from the `start`-th on."""
    width = _width(datatype)
    code = ELEMENT_FORMATS[datatype]
    if datatype != "BF16":
        return list(struct.unpack_from(f"<{count}{code}", raw, start * width))
    halves = bytes(raw[start * width : (start + count) * width])
    wide = bytearray(4 * count)  # each BF16 is the top half of a little-endian FP32
    wide[2::4], wide[3::4] = halves[0::2], halves[1::2]
    return list(struct.unpack(f"<{count}f", wide))


def _width(datatype: str) -> int:
    code = ELEMENT_FORMATS.get(datatype)
    if code is None:
        raise BinaryDataError(f"Binary data of datatype {datatype!r} is not supported.")
    return struct.calcsize(code)


def bytes_spans(raw: memoryview | bytes) -> Iterator[tuple[int, int]]:
    """(start, length) of each BYTES element: a 4-byte little-endian length, then the bytes."""
    offset = 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise BinaryDataError("A BYTES element's 4-byte length is cut short.")
        (length,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + length > len(raw):
            raise BinaryDataError("A BYTES element runs past its tensor's data.")
        yield offset, length
        offset += length


def encode_elements(datatype: str, values: list[Any]) -> bytes:
    """Binary data of a tensor's flattened values (the inverse of `decode_elements`),
    packed `CHUNK` values at a time."""
    if datatype == "BYTES":
        items = [v if isinstance(v, bytes) else str(v).encode() for v in values]
        return b"".join(struct.pack("<I", len(item)) + item for item in items)
    if datatype == "BF16":  # the top half of each little-endian FP32 (a bfloat16's value)
        wide = encode_elements("FP32", values)
        halves = bytearray(len(wide) // 2)
        halves[0::2], halves[1::2] = wide[2::4], wide[3::4]
        return bytes(halves)
    code = ELEMENT_FORMATS[datatype]
    try:
        return b"".join(
            struct.pack(f"<{len(part)}{code}", *part)
            for part in (values[i : i + CHUNK] for i in range(0, len(values), CHUNK))
        )
    except struct.error as exc:
        raise ValueError(f"{datatype} data: {exc}") from None


def wants_binary(request: dict[str, Any], output_name: str) -> bool:
    """Whether the request asks for this output as binary data: `binary_data_output` in its
    parameters, or `binary_data` in the parameters of the requested output of that name."""
    params = request.get("parameters")
    if isinstance(params, dict) and params.get("binary_data_output") is True:
        return True
    for output in request.get("outputs") or []:
        if isinstance(output, dict) and output.get("name") == output_name:
            options = output.get("parameters")
            return isinstance(options, dict) and options.get("binary_data") is True
    return False


def binary_response(response: dict[str, Any], request: dict[str, Any]) -> tuple[bytes, int | None]:
    """The response body, and its JSON header's length when some outputs went binary
    (their `data` replaced by a `binary_data_size` parameter and appended after the JSON)."""
    chunks: list[bytes] = []
    for output in response["outputs"]:
        if wants_binary(request, output["name"]):
            raw = encode_elements(output["datatype"], output.pop("data"))
            output["parameters"] = {**output.get("parameters", {}), "binary_data_size": len(raw)}
            chunks.append(raw)
    header = json.dumps(response).encode()
    if not chunks:
        return header, None
    return header + b"".join(chunks), len(header)
