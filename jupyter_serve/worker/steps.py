"""A continuous batch the worker steps on its own: the `I` frame command "steps".

The server (jupyter_serve/server/pool/continuous.py) starts a run with its first
requests. Each step is one handler call (`step`, the same batch call as any `I`); its
answer goes back as a `T` frame, and the requests it marks as going on (TorchServe's
`ts_stream_next`, jupyter_serve/wire/protocol.py `goes_on`) run again at once, by id and
headers alone, as TorchServe's frontend re-sends them: the worker never waits for the
server between two steps. Between steps it reads what the server sent meanwhile, without
blocking: "join" adds requests, which wait in the worker (`Room`) until a step has a
place for them (at most `capacity` requests a step; the server sends joins ahead, so a
place a step frees is taken at the very next one), and "leave" drops requests whose
client left (the handler no longer sees their ids, as TorchServe's cancel path shows
it). With nothing left to run it waits for the server's next frame; "end" closes the run
with an empty `R`.

A step that fails (the handler raised) is a `T` frame with the `E` header as its "error":
the server fails the run's requests, and the worker drops them all and ignores what
comes until "end", since a join on its way was failed too.
"""

from __future__ import annotations

import select
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from jupyter_serve.wire.protocol import (
    Frame,
    InferenceRequest,
    Kind,
    ProtocolError,
    decode_infer,
    encode_results,
    goes_on,
    read_frame_sync,
    write_frame_sync,
)

__all__ = ["STEP_CONTROLS", "run_steps"]

STEP_CONTROLS = frozenset({"join", "leave", "end"})  # what the server sends during a run

Step = Callable[[list[InferenceRequest]], Frame]


def run_steps(
    sock: socket.socket, first: list[InferenceRequest], step: Step, capacity: int
) -> Frame | None:
    """Step `first` and whatever joins, at most `capacity` requests a step, until the
    server's "end": the run's closing `R` (to send); None if the server closed the socket."""
    room = Room(capacity, deque(first))
    batch: list[InferenceRequest] | None = room.admit([])
    while batch:
        reply = step(batch)
        if reply.kind is Kind.ERROR:
            write_frame_sync(sock, Frame(Kind.STEP, {"error": reply.header}))
            return _until_end(sock)
        write_frame_sync(sock, Frame(Kind.STEP, reply.header, reply.payload))
        headers = {request.request_id: request.headers for request in batch}
        going = [InferenceRequest(rid, headers[rid]) for rid in _going_on(reply)]
        batch = _next_batch(sock, going, room)
    return None if batch is None else encode_results([])


@dataclass
class Room:
    """Requests that joined and wait for a place (the server sends joins ahead, so that a
    place a step frees is taken at the very next step)."""

    capacity: int
    waiting: deque[InferenceRequest] = field(default_factory=deque)

    def admit(self, going: list[InferenceRequest]) -> list[InferenceRequest]:
        """`going` and as many waiting requests as there are free places."""
        free = max(self.capacity - len(going), 0)
        admitted = [self.waiting.popleft() for _ in range(min(free, len(self.waiting)))]
        return going + admitted

    def leave(self, gone: set[str]) -> None:
        self.waiting = deque(r for r in self.waiting if r.request_id not in gone)


def _going_on(reply: Frame) -> list[str]:
    """The ids of the requests a step's answer marks as going on."""
    return [str(result["request_id"]) for result in reply.header["results"]
            if goes_on(result.get("headers") or {})]  # fmt: skip


def _next_batch(
    sock: socket.socket, going: list[InferenceRequest], room: Room
) -> list[InferenceRequest] | None:
    """The next step's requests: those going on, less those that left, and the ones that
    joined as places allow; with none, waits for the server. [] once it ends the run; None
    at EOF."""
    while True:
        if (going or room.waiting) and not _readable(sock):
            return room.admit(going)
        frame = read_frame_sync(sock)
        if frame is None:
            return None
        requests, command = _control(frame)
        if command == "end" and not going and not room.waiting:
            return []
        if command == "join":
            room.waiting.extend(requests)
        elif command == "leave":
            gone = {request.request_id for request in requests}
            going = [request for request in going if request.request_id not in gone]
            room.leave(gone)


def _until_end(sock: socket.socket) -> Frame | None:
    """After a failed step: skip what the server sent until its "end"."""
    while (frame := read_frame_sync(sock)) is not None:
        if _control(frame)[1] == "end":
            return encode_results([])
    return None


def _control(frame: Frame) -> tuple[list[InferenceRequest], str]:
    if frame.kind is not Kind.INFER:
        raise ProtocolError(f"Expected a step control frame, got {frame.kind.value}")
    try:
        return decode_infer(frame)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"Bad step control header: {exc!r}") from exc


def _readable(sock: socket.socket) -> bool:
    """Whether the server sent something since (a frame is read whole once it began)."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)
