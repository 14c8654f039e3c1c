"""The framed wire protocol between the Jupyter server and its worker processes.

One connection per worker (a Unix socketpair inherited by the worker), carrying
frames in both directions. Standard library only: no pickle, no torch.

Frame layout (network byte order)::

    +-----------+--------+-------------+----------------------+-----------------+
    | !I length | !B kind| !I hdr_len  | header: UTF-8 JSON   | payload: bytes  |
    +-----------+--------+-------------+----------------------+-----------------+
      length counts everything after itself: 1 + 4 + hdr_len + len(payload)

Bodies travel as raw bytes in the payload; the JSON header addresses each one
as `[offset, length]` into the payload (no base64).

Kinds (letters as TorchServe's, for familiarity)::

    kind  direction        header
    ----  ---------------  ---------------------------------------------------------
    L     server -> worker LoadRequest: model_name, model_dir, handler, gpu_id,
                           batch_size, limit_max_image_pixels, server_version,
                           sys_path, env, torch_threads, torch_burst_threads
                           (worker.service.LoadSpec)
    I     server -> worker {"requests": [WireRequest...], "command": "predict"|"describe"|
                           "steps"|"join"|"leave"|"end"}
                           WireRequest: request_id, headers {str: str},
                           parameters [{name, content_type, body: [off, len]}]
    S     worker -> server an intermediate (streamed) answer to the I in flight:
                           {"status": code, "message": str, "results": [WireResult...]}
                           one WireResult per request the handler streamed to
    T     worker -> server one step of a "steps" run: as R's reply to I
    R     worker -> server reply to L: {"status": 200, "message": ...}
                           reply to I: {"results": [WireResult...], "metrics": [...],
                           "predict_ms": float}
                           WireResult: request_id, status, reason, content_type|null,
                           headers {str: str}, body: [off, len]
    E     worker -> server the whole L or I failed: {"status", "type", "message",
                           "traceback"}; status 500/503/507 or a handler's code

The worker factory (jupyter_serve.worker.factory) speaks the same frames over a
SOCK_SEQPACKET socket, one frame per packet (`decode_packet`), descriptors riding
along as SCM_RIGHTS::

    F     server -> factory {"id": int} + 3 fds: the worker's socket end, the write
                           ends of its stdout and stderr pipes
    R     factory -> server first, unasked: {"status": 200, "message": "factory",
                           "pid", "modules": [str...], "threads": int}
                           forked: {"id", "pid"}; a child exited: {"exited": pid,
                           "code": int (negative: killed by that signal)}
    E     factory -> server the fork failed: {"id", "status": 500, "message"}

A KServe request travels as one WireRequest whose body is the client's, untouched,
and whose headers carry `KSERVE_HEADER` (set by the server, never taken from a
client): JSON {"protocol": "v1"|"v2", "room": items the queue takes, "max_elements",
"model": [name, version]}; the worker opens it (jupyter_serve.worker.kserve).

Copies: a body is not copied on its way through the protocol. `frame_parts` gives a
frame as its head and the bodies themselves, sent as they are (`gathered`: parts under
`SMALL_PART` are joined, since a copy of a few KiB costs less than a system call);
`decode` returns a payload that is a view of the bytes the frame was read into, and
`blob` a view of one body in it. So between the client's socket and the handler (the
kernel's own copies aside) a request's body is copied twice: into the serve lane's
read buffer, and into the `bytearray` the handler gets (a small one once more, joined
with its frame's head); an answer's body once: out of the frame the server received
(a small one once more, joined with its HTTP head; a batch's bodies once more, joined
into the worker's frame). asyncio (3.11) itself copies into its buffer what a socket
does not take at once.

One request is in flight per connection at a time: the server sends L or I and
waits for the matching R or E, reading any number of S frames before it (a
handler calling TorchServe's `send_intermediate_predict_response`). A closed
connection (EOF) means the worker died.

A continuous batch is one such request that the worker steps on its own
(jupyter_serve/worker/steps.py): I "steps" starts it with its first requests and its
`capacity` (the most requests a step holds; the rest wait in the worker); the worker
answers each step with a T frame and, while any request goes on, runs the next step at
once without waiting for the server. Meanwhile the server may send I "join" (requests
that take free places from the next step on) and I "leave" (requests, by id alone, whose
client left); once a step leaves nothing running and no join is on its way, the server
sends I "end" and the worker closes the run with an empty R (or E if a step failed).
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

Buffer = bytes | bytearray | memoryview  # what a frame payload part may be

KSERVE_HEADER = "X-Jupyter-Serve-Kserve"
"""The request header saying a body is a KServe envelope for the worker to open."""

_LENGTH = struct.Struct("!I")
_PREFIX = struct.Struct("!BI")  # kind, header length
MAX_FRAME_BYTES = 2**32 - 1
SMALL_PART = 65536  # parts under this are joined before a send; larger ones go as they are
_MAX_GATHER = 512  # buffers per sendmsg (under every platform's IOV_MAX)
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))  # one for all frames (json.dumps
# with non-default arguments builds a new encoder per call)


class ProtocolError(Exception):
    """A malformed frame: the connection cannot be trusted any more."""


class Kind(str, Enum):
    LOAD = "L"
    INFER = "I"
    STREAM = "S"
    RESULT = "R"
    STEP = "T"
    ERROR = "E"
    FORK = "F"


@dataclass(frozen=True)
class Frame:
    """One message: a kind, a JSON header and raw payload bytes."""

    kind: Kind
    header: dict[str, Any]
    payload: Buffer = b""  # a decoded frame's is a view of the bytes it was read into


def encode(frame: Frame) -> bytes:
    """The bytes of `frame` on the wire, length prefix included."""
    return encode_parts(frame.kind, frame.header, (frame.payload,))


def encode_parts(kind: Kind, header: dict[str, Any], payload: Sequence[Buffer]) -> bytes:
    """A frame's bytes from its payload in parts, joined once (no payload copy first)."""
    return b"".join(frame_parts(kind, header, payload))


def frame_parts(kind: Kind, header: dict[str, Any], payload: Sequence[Buffer]) -> list[Buffer]:
    """A frame as parts to send one after the other: its prefix and header, then `payload`'s
    parts as they are (bodies are not copied: `gathered` or `send_parts_sync` send them)."""
    head = _COMPACT_JSON.encode(header).encode("utf-8")
    length = _PREFIX.size + len(head) + sum(len(part) for part in payload)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"Frame of {length} bytes exceeds the 4 GiB limit")
    prefix = _LENGTH.pack(length) + _PREFIX.pack(ord(kind.value), len(head))
    return [prefix + head, *payload]


def gathered(parts: Sequence[Buffer], small: int = SMALL_PART) -> list[Buffer]:
    """`parts` with each run of parts under `small` bytes joined into one, larger parts as
    they are: a body of `small` bytes or more is sent without a copy, and smaller ones
    cost one copy instead of a system call each."""
    out: list[Buffer] = []
    run: list[Buffer] = []
    for part in parts:
        if len(part) < small:
            run.append(part)
            continue
        if run:
            out.append(b"".join(run))
            run = []
        out.append(part)
    if run:
        out.append(b"".join(run))
    return out


def decode(body: Buffer) -> Frame:
    """Parse one frame's bytes (everything after the length prefix). The payload is a view
    of `body`, not a copy: `body` must not change while the frame is in use."""
    view = memoryview(body)
    if len(view) < _PREFIX.size:
        raise ProtocolError("Frame shorter than its prefix")
    kind_byte, header_len = _PREFIX.unpack_from(view)
    end = _PREFIX.size + header_len
    if end > len(view):
        raise ProtocolError("Frame header runs past the frame")
    try:
        kind = Kind(chr(kind_byte))
        header = json.loads(bytes(view[_PREFIX.size : end]))
    except ValueError as exc:
        raise ProtocolError(f"Bad frame: {exc}") from exc
    if not isinstance(header, dict):
        raise ProtocolError("Frame header is not a JSON object")
    return Frame(kind, header, view[end:])


def decode_packet(packet: Buffer) -> Frame:
    """The frame `encode` put in one datagram (the worker factory's packets)."""
    if len(packet) < _LENGTH.size or _LENGTH.unpack_from(packet)[0] != len(packet) - _LENGTH.size:
        raise ProtocolError("Packet length does not match its frame's length prefix")
    return decode(packet[_LENGTH.size :])


def read_frame_sync(sock: socket.socket) -> Frame | None:
    """Read one frame from a blocking socket; None on a clean end of stream before a frame.
    The frame is read straight into its own buffer (its payload is a view of it)."""
    prefix = _recv_exactly(sock, _LENGTH.size)
    if prefix is None:
        return None
    (length,) = _LENGTH.unpack(prefix)
    body = _recv_exactly(sock, length)
    if body is None:
        raise ProtocolError("Connection closed inside a frame")
    return decode(body)


def write_frame_sync(sock: socket.socket, frame: Frame) -> None:
    """Send `frame` on a blocking socket, its payload gathered, not copied, into the send."""
    send_parts_sync(sock, frame_parts(frame.kind, frame.header, (frame.payload,)))


def send_parts_sync(sock: socket.socket, parts: Sequence[Buffer]) -> None:
    """Send `parts` in order with gathered writes (`sendmsg`), however much each call takes."""
    views = [memoryview(part).cast("B") for part in parts if len(part)]
    first = 0
    while first < len(views):
        sent = sock.sendmsg(views[first : first + _MAX_GATHER])
        while sent and sent >= len(views[first]):
            sent -= len(views[first])
            first += 1
        if sent:
            views[first] = views[first][sent:]


def _recv_exactly(sock: socket.socket, size: int) -> bytearray | None:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        count = sock.recv_into(view[received:], size - received)
        if count == 0:
            if received:
                raise ProtocolError("Connection closed inside a frame")
            return None
        received += count
    return buffer


@dataclass
class PayloadBuilder:
    """Collects bodies into one payload and hands out their `[offset, length]`."""

    parts: list[Buffer] = field(default_factory=list)
    size: int = 0

    def add(self, data: Buffer) -> list[int]:
        chunk = memoryview(data).cast("B") if isinstance(data, memoryview) else data
        ref = [self.size, len(chunk)]
        self.parts.append(chunk)  # the body itself, not a copy
        self.size += len(chunk)
        return ref

    def build(self) -> bytes:
        return b"".join(self.parts)


def blob(payload: Buffer, ref: list[int]) -> memoryview:
    """A view of the body `ref` (`[offset, length]`) points at inside `payload` (no copy)."""
    offset, length = ref
    if offset < 0 or length < 0 or offset + length > len(payload):
        raise ProtocolError(f"Body reference {ref} outside a payload of {len(payload)} bytes")
    return memoryview(payload)[offset : offset + length]


# ---- typed messages carried by I and R frames --------------------------------


@dataclass(frozen=True)
class Parameter:
    """One named input of a request: a form field, or "body" for a raw body."""

    name: str
    content_type: str
    value: Buffer  # decoded from a frame: a view of it (the worker copies it once, for the handler)


@dataclass(frozen=True)
class InferenceRequest:
    request_id: str
    headers: dict[str, str] = field(default_factory=dict)
    parameters: tuple[Parameter, ...] = ()


@dataclass(frozen=True)
class InferenceResult:
    """One response as the route will send it.

    `queue_ms` never travels on the wire: the server's pool sets it to the time the
    request waited in the queue before its batch left for a worker.
    """

    request_id: str
    status: int = 200
    body: bytes = b""
    content_type: str | None = None
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    queue_ms: float = 0.0


def encode_infer(requests: list[InferenceRequest], command: str = "predict") -> Frame:
    """An `I` frame carrying a batch."""
    header, payload = _infer_wire(requests, command)
    return Frame(Kind.INFER, header, payload.build())


def encode_infer_parts(
    requests: list[InferenceRequest], command: str = "predict", **extra: Any
) -> list[Buffer]:
    """`encode_infer`'s frame as `frame_parts`: the bodies themselves, not copies; `extra`
    goes in the header (a "steps" run's `capacity`)."""
    header, payload = _infer_wire(requests, command)
    return frame_parts(Kind.INFER, {**header, **extra}, payload.parts)


def _infer_wire(
    requests: list[InferenceRequest], command: str
) -> tuple[dict[str, Any], PayloadBuilder]:
    payload = PayloadBuilder()
    wire = [
        {
            "request_id": r.request_id,
            "headers": r.headers,
            "parameters": [
                {"name": p.name, "content_type": p.content_type, "body": payload.add(p.value)}
                for p in r.parameters
            ],
        }
        for r in requests
    ]
    return {"requests": wire, "command": command}, payload


def decode_infer(frame: Frame) -> tuple[list[InferenceRequest], str]:
    """The batch and command of an `I` frame."""
    requests = [
        InferenceRequest(
            request_id=str(r["request_id"]),
            headers={str(k): str(v) for k, v in r.get("headers", {}).items()},
            parameters=tuple(
                Parameter(p["name"], p.get("content_type", ""), blob(frame.payload, p["body"]))
                for p in r.get("parameters", [])
            ),
        )
        for r in frame.header["requests"]
    ]
    return requests, str(frame.header.get("command", "predict"))


STREAM_NEXT = "ts_stream_next"


def goes_on(headers: Mapping[str, str]) -> bool:
    """Whether a continuous batch's step answer (its result headers) leaves its request in
    the batch: TorchServe keeps a request unless its `ts_stream_next` is absent or
    exactly "false"."""
    value = headers.get(STREAM_NEXT)
    return value is not None and value != "false"


@dataclass(frozen=True)
class StreamChunk:
    """An `S` frame: intermediate results of the batch in flight, and TorchServe's
    batch-level status code and message (anything but 200 fails the batch)."""

    results: list[InferenceResult]
    status: int = 200
    message: str = ""


def encode_results(results: list[InferenceResult], **extra: Any) -> Frame:
    """An `R` frame answering a batch; `extra` (metrics, predict_ms) goes in the header."""
    wire, payload = _wire_results(results)
    return Frame(Kind.RESULT, {"results": wire, **extra}, payload)


def decode_results(frame: Frame) -> list[InferenceResult]:
    """The per-request results of an `R` (or `S`) frame."""
    return [
        InferenceResult(
            request_id=str(r["request_id"]),
            status=int(r.get("status", 200)),
            body=bytes(blob(frame.payload, r["body"])),  # the server's one copy of a result
            content_type=r.get("content_type"),
            reason=str(r.get("reason") or ""),
            headers={str(k): str(v) for k, v in (r.get("headers") or {}).items()},
        )
        for r in frame.header["results"]
    ]


def encode_chunk(chunk: StreamChunk) -> Frame:
    """An `S` frame carrying one round of intermediate results."""
    wire, payload = _wire_results(chunk.results)
    header = {"status": chunk.status, "message": chunk.message, "results": wire}
    return Frame(Kind.STREAM, header, payload)


def decode_chunk(frame: Frame) -> StreamChunk:
    """The intermediate results of an `S` frame."""
    header = frame.header
    status, message = int(header.get("status", 200)), str(header.get("message") or "")
    return StreamChunk(decode_results(frame), status, message)


def _wire_results(results: list[InferenceResult]) -> tuple[list[dict[str, Any]], bytes]:
    payload = PayloadBuilder()
    wire = [
        {
            "request_id": r.request_id,
            "status": r.status,
            "reason": r.reason,
            "content_type": r.content_type,
            "headers": r.headers,
            "body": payload.add(r.body),
        }
        for r in results
    ]
    return wire, payload.build()
