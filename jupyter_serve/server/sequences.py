"""TorchServe's sequence batching: stateful sessions, each pinned to one worker, run in order.

A model with `sequenceBatching: true` (its model-config.yaml) gets a `SequenceBatcher` in
place of the shared queue (server/batching.py). A request names its sequence with the
`ts_request_sequence_id` header; without one (or with an empty one) a new sequence starts,
its id `ts-seq-<uuid4>` as TorchServe issues them, and the handler sees
`ts_request_sequence_start: true`. Every request reaches the handler with the header
naming its sequence, and every answer carries it back (TorchServe leaves that to the
handler; here a handler that does not set it gets it anyway, so a client can go on with a
sequence the server started).

Each sequence has its own queue (`maxSequenceJobQueueSize` requests waiting) and is pinned,
when it starts, to one worker, taken in turn (TorchServe hands a new sequence to the worker
that has waited longest for one): the handler of that worker holds its state. A worker's
batch holds at most one request per sequence, so a sequence's requests run one at a time,
in order, batched with other sequences' requests; with continuous batching as well
(server/pool/continuous.py) a sequence's next request may join a step while an earlier one
still streams, as TorchServe's sequence_continuous_batching example needs for its cancel.

A sequence ends when its handler answers with `ts_request_sequence_end: <id>[;<id>...]`,
when it has waited `sequenceMaxIdleMSec` for its next request, or, past its
`sequenceTimeoutMSec` lifetime, once its queued requests are served. A request naming a
sequence that ended starts a new one under that id (without the start header), as in
TorchServe. At most `maxNumSequence` sequences are open; a request that would open one
more, or that finds its sequence's queue full, gets TorchServe's 503. When a worker stops,
its sequences end and their waiting requests get 503 (their state was in that worker).

Sequence ids are checked (TorchServe takes anything): at most 128 printable characters,
else 400.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jupyter_serve.server.batching import Batcher, BatcherClosed, ChunkSink, Pending, fail
from jupyter_serve.wire.errors import BadRequest, ServeError, queue_full
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult

if TYPE_CHECKING:
    from jupyter_serve.server.models import ModelSpec

__all__ = ["SEQUENCE_END", "SEQUENCE_ID", "SEQUENCE_START", "SequenceBatcher", "WorkerQueue"]

SEQUENCE_ID = "ts_request_sequence_id"
SEQUENCE_START = "ts_request_sequence_start"
SEQUENCE_END = "ts_request_sequence_end"
MAX_SEQUENCE_ID = 128


@dataclass(eq=False)
class OpenSequence:
    """One sequence: its waiting requests, its worker, and what may end it."""

    id: str
    home: WorkerQueue | None  # None until a worker takes it (none was taking new ones yet)
    queue: deque[Pending] = field(default_factory=deque)
    busy: int = 0  # its requests in the worker's hands (taken, not yet answered)
    expired: bool = False  # past its lifetime: ends once its queue is served
    idle_timer: asyncio.TimerHandle | None = None
    lifetime_timer: asyncio.TimerHandle | None = None

    def prune(self) -> int:
        """Drop requests whose client left; how many still wait."""
        self.queue = deque(item for item in self.queue if item.alive)
        return len(self.queue)


class SequenceBatcher(Batcher):
    """The queue of a model with sequence batching: sequences pinned to workers' queues."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec.model_name, batch_size=spec.batch_size,
                         max_batch_delay=spec.max_batch_delay,
                         job_queue_size=spec.job_queue_size)  # fmt: skip
        self.idle_s = spec.sequence_max_idle_ms / 1000
        self.lifetime_s = spec.sequence_timeout_ms / 1000
        self.queue_size = spec.max_sequence_job_queue_size
        self.max_sequences = spec.max_num_sequence
        self.sequences: dict[str, OpenSequence] = {}
        self.homes: list[WorkerQueue] = []
        self.turn = 0

    # ---- the server side: requests in ----

    def submit(self, request: InferenceRequest, deadline: float, *, command: str = "predict",
               on_chunk: ChunkSink | None = None,
               version: str | None = None) -> asyncio.Future[InferenceResult]:  # fmt: skip
        """Queue `request` on its sequence (module docstring); 400 for a bad sequence id,
        503 as TorchServe for a full sequence queue, too many sequences or no worker."""
        if self.closed or command != "predict":  # describe jobs: the shared queue
            return super().submit(request, deadline, command=command, on_chunk=on_chunk,
                                  version=version)  # fmt: skip
        request, sequence_id = sequence_of(request)
        sequence = self.sequences.get(sequence_id) or self._open(sequence_id, version)
        if sequence.prune() >= self.queue_size:
            raise queue_full(self.model_name, version)
        loop = asyncio.get_running_loop()
        item = Pending(request, deadline, loop.create_future(), loop.time(), command, on_chunk)
        item.sequence = sequence
        sequence.queue.append(item)
        if sequence.idle_timer is not None:
            sequence.idle_timer.cancel()
            sequence.idle_timer = None
        if sequence.home is not None:
            sequence.home.arrived.set()
        return item.future

    def _open(self, sequence_id: str, version: str | None) -> OpenSequence:
        if len(self.sequences) >= self.max_sequences:
            raise queue_full(self.model_name, version)
        home = self.homes[self.turn % len(self.homes)] if self.homes else None
        self.turn += 1
        sequence = OpenSequence(sequence_id, home)
        if self.lifetime_s > 0:
            loop = asyncio.get_running_loop()
            sequence.lifetime_timer = loop.call_later(self.lifetime_s, self._expire, sequence)
        self.sequences[sequence_id] = sequence
        return sequence

    # ---- the worker side ----

    def for_worker(self, key: object) -> WorkerQueue:
        """The queue of one worker process, taking new sequences in turn from now on."""
        home = WorkerQueue(self, key)
        self.homes.append(home)
        for sequence in self.sequences.values():
            if sequence.home is None:  # opened while no worker was taking sequences
                sequence.home = home
                home.arrived.set()
        return home

    def release(self, queue: Batcher) -> None:
        """A worker stopped: its sequences end; their waiting requests get 503."""
        if queue not in self.homes:
            return
        self.homes.remove(queue)
        for sequence in [s for s in self.sequences.values() if s.home is queue]:
            self._close(sequence, queue_full(self.model_name))

    def close(self, error: ServeError) -> None:
        super().close(error)
        for sequence in list(self.sequences.values()):
            self._close(sequence, error)
        for home in self.homes:
            home.arrived.set()

    # ---- ending sequences ----

    def settle(
        self, items: Iterable[Pending], results: list[InferenceResult]
    ) -> list[InferenceResult]:
        """A batch or step came back: its sequences are free for their next request,
        sequences the handler ended end, and each answer names its sequence."""
        items = list(items)
        for result in results:
            for sequence_id in result.headers.get(SEQUENCE_END, "").split(";"):
                sequence = self.sequences.get(sequence_id.strip())
                if sequence is not None:
                    self._close(sequence, queue_full(self.model_name))
        for item in items:
            sequence = item.sequence  # the one it was taken for, even if its id was reused
            if isinstance(sequence, OpenSequence) and sequence.busy > 0:
                sequence.busy -= 1
                if self.sequences.get(sequence.id) is sequence:
                    self.rest(sequence)
        named = {item.request.request_id: item.sequence.id for item in items
                 if isinstance(item.sequence, OpenSequence)}  # fmt: skip
        return [_naming(result, named.get(result.request_id, "")) for result in results]

    def rest(self, sequence: OpenSequence) -> None:
        """A sequence with nothing in flight waits `idle_s` for its next request."""
        if sequence.busy or sequence.prune():
            if sequence.home is not None:
                sequence.home.arrived.set()
            return
        if sequence.expired:
            self._close(sequence)
            return
        loop = asyncio.get_running_loop()
        sequence.idle_timer = loop.call_later(self.idle_s, self._idle, sequence)

    def _idle(self, sequence: OpenSequence) -> None:
        sequence.idle_timer = None
        if not sequence.busy and not sequence.prune():
            self._close(sequence)

    def _expire(self, sequence: OpenSequence) -> None:
        sequence.lifetime_timer = None
        sequence.expired = True
        if not sequence.busy and not sequence.prune():
            self._close(sequence)

    def _close(self, sequence: OpenSequence, error: ServeError | None = None) -> None:
        if self.sequences.get(sequence.id) is sequence:
            del self.sequences[sequence.id]
        for timer in (sequence.idle_timer, sequence.lifetime_timer):
            if timer is not None:
                timer.cancel()
        waiting, sequence.queue = list(sequence.queue), deque()
        if error is not None:
            fail(waiting, error)


def _naming(result: InferenceResult, sequence_id: str) -> InferenceResult:
    """`result` with its sequence's id among its headers, unless the handler set it."""
    if not sequence_id or any(key.lower() == SEQUENCE_ID for key in result.headers):
        return result
    headers = {**result.headers, SEQUENCE_ID: sequence_id}
    return InferenceResult(result.request_id, result.status, result.body, result.content_type,
                           result.reason, headers, result.queue_ms)  # fmt: skip


def sequence_of(request: InferenceRequest) -> tuple[InferenceRequest, str]:
    """`request` with its sequence headers as the handler sees them, and its sequence id."""
    headers = {k: v for k, v in request.headers.items() if k.lower() != SEQUENCE_ID}
    named = next((v for k, v in request.headers.items() if k.lower() == SEQUENCE_ID), "")
    if len(named) > MAX_SEQUENCE_ID or not named.isprintable():
        raise BadRequest(f"Invalid sequence id: at most {MAX_SEQUENCE_ID} printable characters.")
    if not named:
        named = f"ts-seq-{uuid.uuid4()}"
        headers[SEQUENCE_START] = "true"
    headers[SEQUENCE_ID] = named
    return InferenceRequest(request.request_id, headers, request.parameters), named


class WorkerQueue(Batcher):
    """One worker's view of a `SequenceBatcher`: the sequences pinned to it, then describe
    jobs from the shared queue, at most one request per sequence at a time."""

    def __init__(self, owner: SequenceBatcher, key: object) -> None:
        super().__init__(owner.model_name, batch_size=owner.batch_size)
        self.owner = owner
        self.key = key
        self.arrived = asyncio.Event()

    async def next_batch(self) -> list[Pending]:
        while True:
            if self.owner.closed:
                raise BatcherClosed(self.model_name)
            batch = self.take_now(self.batch_size) or self.owner.take_ready()
            if batch:
                return batch
            self.arrived.clear()
            shared = asyncio.ensure_future(self.owner.wait_first())
            mine = asyncio.ensure_future(self.arrived.wait())
            try:
                await asyncio.wait((shared, mine), return_when=asyncio.FIRST_COMPLETED)
            finally:
                shared.cancel()
                mine.cancel()

    def take_ready(self) -> list[Pending] | None:
        return self.take_now(self.batch_size) or self.owner.take_ready()

    async def wait_first(self) -> None:
        """Return once a sequence pinned here has a request `take_now` would take (what
        joins a running continuous batch as it arrives)."""
        while not self._ready():
            if self.owner.closed:
                raise BatcherClosed(self.model_name)
            self.arrived.clear()
            await self.arrived.wait()

    def _ready(self) -> list[OpenSequence]:
        """The sequences pinned here with a request waiting and none in the worker's hands."""
        return [s for s in self.owner.sequences.values()
                if s.home is self and not s.busy and s.prune()]  # fmt: skip

    def take_now(self, limit: int) -> list[Pending]:
        """Up to `limit` requests, the next one of each free sequence pinned here, oldest
        first (the describe jobs of the shared queue wait for `next_batch`)."""
        ready = self._ready()
        ready.sort(key=lambda s: s.queue[0].arrival)
        batch: list[Pending] = []
        now = asyncio.get_running_loop().time()
        for sequence in ready[:limit]:
            item = sequence.queue.popleft()
            if item.deadline <= now:
                item.future.set_exception(self.owner.timeout_error(item, now))
                self.owner.rest(sequence)
                continue
            sequence.busy += 1
            batch.append(item)
        return batch

    def requeue(self, batch: Iterable[Pending]) -> None:
        for item in reversed(list(batch)):
            sequence = item.sequence
            if not isinstance(sequence, OpenSequence):  # a describe job: the shared queue
                self.owner.requeue([item])
                continue
            if self.owner.sequences.get(sequence.id) is not sequence:  # it ended meanwhile
                fail([item], queue_full(self.model_name))
                continue
            sequence.busy = max(sequence.busy - 1, 0)
            if item.alive:
                sequence.queue.appendleft(item)
        self.arrived.set()

    def settle(
        self, items: Iterable[Pending], results: list[InferenceResult]
    ) -> list[InferenceResult]:
        return self.owner.settle(items, results)
