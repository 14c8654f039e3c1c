"""The per-model-version request queue that idle workers pull batches from.

Runs in the Jupyter server process: pure asyncio, no I/O, no torch.

Clock and units: every time here is `asyncio.get_running_loop().time()`, in
**seconds** (a monotonic clock). `max_batch_delay` is in seconds too;
TorchServe's REST and yaml `maxBatchDelay` is in milliseconds and is converted
once, when the `ModelSpec` is built.

A route calls `submit(request, deadline)` and awaits the returned future. Each
worker's dispatch coroutine calls `next_batch()`, sends the batch to its worker
and sets every future. Two policies shape a batch once a first item is queued:

* ``EAGER`` (our default): take what is queued right now, up to `batch_size`,
  and return at once. Batches grow by themselves while every worker is busy.
* ``STRICT`` (TorchServe's `pollBatch`): wait until `batch_size` items are
  queued or `max_batch_delay` has passed since the *first* item arrived.

A full batch is always returned without waiting. Items whose future is already
done (the client went away) are dropped, and items whose deadline has passed
get a `RequestTimeout` and are dropped, before a batch leaves the queue.
Describe jobs (command "describe") always travel alone, as in TorchServe.

A request may carry an `on_chunk` sink: the pool hands it each intermediate result
the handler streams for that request (in order, before the future's final result).
Without one, streamed chunks are dropped and only the final result arrives.

A worker takes its batches from `for_worker(worker)`: this queue itself, shared by all
workers; sequence batching (server/sequences.py) gives each worker a queue of its own
sequences. A continuous batch takes the requests that join a running batch with
`take_now`, and every answered batch (or step) is `settle`d with the queue it came from.
"""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jupyter_serve.wire.errors import RequestTimeout, ServeError, no_worker_message, queue_full
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult

if TYPE_CHECKING:
    from jupyter_serve.server.models import ModelSpec

__all__ = [
    "Batcher",
    "BatcherClosed",
    "ChunkSink",
    "Pending",
    "no_worker_message",
]

ChunkSink = Callable[[InferenceResult], None]
"""Takes one intermediate result of a streaming request; must not raise."""


class BatcherClosed(Exception):
    """`next_batch` on a closed batcher: the dispatch loop should stop."""


@dataclass(eq=False)
class Pending:
    """One queued request, its deadline and the future its client awaits."""

    request: InferenceRequest
    deadline: float
    future: asyncio.Future[InferenceResult]
    arrival: float
    command: str = "predict"
    on_chunk: ChunkSink | None = None
    sequence: Any = None  # the sequence it belongs to (server/sequences.py), if any

    @property
    def alive(self) -> bool:
        return not self.future.done()


@dataclass(eq=False)
class Batcher:
    """One queue per model version, shared by all of its workers.

    Args:
        model_name: used in error messages.
        batch_size: the most requests one batch holds (>= 1).
        max_batch_delay: seconds a STRICT batch may wait for more items,
            counted from its first item's arrival.
        job_queue_size: the most queued requests; one more is refused with 503.
        strict: TorchServe's policy (wait for more) instead of EAGER.
    """

    model_name: str
    batch_size: int = 1
    max_batch_delay: float = 0.1
    job_queue_size: int = 100
    strict: bool = False
    _queue: deque[Pending] = field(default_factory=deque, init=False, repr=False)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)
    _closed: ServeError | None = field(default=None, init=False, repr=False)
    _expiry: asyncio.TimerHandle | None = field(default=None, init=False, repr=False)

    @classmethod
    def for_spec(cls, spec: ModelSpec) -> Batcher:
        """The batcher a model version's `ModelSpec` asks for."""
        return cls(
            spec.model_name,
            batch_size=spec.batch_size,
            max_batch_delay=spec.max_batch_delay,
            job_queue_size=spec.job_queue_size,
            strict=spec.batch_policy == "strict",
        )

    @property
    def pending_count(self) -> int:
        """Queued requests still waiting for an answer."""
        return sum(1 for item in self._queue if item.alive)

    @property
    def remaining_capacity(self) -> int:
        return max(self.job_queue_size - self.pending_count, 0)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def submit(
        self,
        request: InferenceRequest,
        deadline: float,
        *,
        command: str = "predict",
        on_chunk: ChunkSink | None = None,
        version: str | None = None,
    ) -> asyncio.Future[InferenceResult]:
        """Queue `request` until `deadline` (loop time, seconds); await the future it returns.

        `on_chunk` receives the intermediate results the handler streams for it; `version`
        is the one the request named (TorchServe's 503 text names it).

        Raises:
            ServiceUnavailable: the queue already holds `job_queue_size` requests.
            ServeError: the batcher was closed (a copy of the close error).
        """
        if self._closed is not None:
            raise copy.copy(self._closed)
        if len(self._queue) >= self.job_queue_size and self._prune() >= self.job_queue_size:
            raise queue_full(self.model_name, version)
        loop = asyncio.get_running_loop()
        item = Pending(request, deadline, loop.create_future(), loop.time(), command, on_chunk)
        self._queue.append(item)
        self._arrived.set()
        self._watch_deadlines()
        return item.future

    async def next_batch(self) -> list[Pending]:
        """Wait for the first item, then form a batch by the policy; never empty.

        Raises:
            BatcherClosed: the batcher was closed, before or while waiting.
        """
        while True:
            await self._wait_first()
            if self.strict:
                await self._wait_full()
            batch = self._take()
            if batch:
                return batch

    def take_ready(self) -> list[Pending] | None:
        """A batch `next_batch` would return at once, taken without awaiting, else None.

        The worker pool asks this first when a worker comes free, so the next batch is
        on its way to the worker before the event loop turns to writing the previous
        batch's answers: worker and server overlap instead of taking turns.
        """
        if self._closed is not None or not self._prune():
            return None
        if self.strict and self._left_to_wait() > 0:
            return None
        return self._take() or None

    def take_now(self, limit: int) -> list[Pending]:
        """Up to `limit` live prediction requests queued right now, never waiting: those that
        join a running continuous batch (server/pool/continuous.py). A describe job is left
        for a worker with no batch running, as TorchServe takes them."""
        if self._closed is not None or limit <= 0 or not self._prune():
            return []
        taken: list[Pending] = []
        while self._queue and len(taken) < limit and self._queue[0].command == "predict":
            taken.append(self._queue.popleft())
        return taken

    def requeue(self, batch: Iterable[Pending]) -> None:
        """Put a batch taken but not sent back at the head of the queue, in order."""
        items = [item for item in batch if item.alive]
        if self._closed is not None:
            fail(items, self._closed)
            return
        self._queue.extendleft(reversed(items))
        if items:
            self._arrived.set()
            if self._expiry is not None:  # the head is older now: watch its deadline
                self._expiry.cancel()
                self._expiry = None
            self._watch_deadlines()

    def close(self, error: ServeError) -> None:
        """Fail everything queued with copies of `error`; later submits raise it too."""
        self._closed = error
        self.fail_queued(error)
        self._arrived.set()

    def fail_queued(self, error: ServeError) -> None:
        """Fail every request queued now with copies of `error` (e.g. its model's only
        worker failed to load); the batcher stays open."""
        items = list(self._queue)
        self._queue.clear()
        fail(items, error)

    # ---- one worker's view (server/sequences.py has per-worker queues) -----------

    def for_worker(self, key: object) -> Batcher:
        """The queue the worker `key` takes its batches from: this one, shared by all."""
        return self

    def release(self, queue: Batcher) -> None:
        """The worker of `queue` (`for_worker`) stopped taking batches."""

    def settle(
        self, items: Iterable[Pending], results: list[InferenceResult]
    ) -> list[InferenceResult]:
        """A batch (or a continuous batch's step) of `items` was answered with `results`
        (empty: it failed): the results to deliver."""
        return results

    async def wait_first(self) -> None:
        """Return once a live request is queued; `BatcherClosed` once closed."""
        await self._wait_first()

    # ---- internals -----------------------------------------------------------

    async def _wait_first(self) -> None:
        """Return once a live item is queued (event first, then look: no lost items)."""
        while True:
            if self._closed is not None:
                raise BatcherClosed(self.model_name)
            self._prune()
            if self._queue:
                return
            self._arrived.clear()
            await self._arrived.wait()

    async def _wait_full(self) -> None:
        """STRICT: wait for `batch_size` live items or the delay after the first arrival."""
        while self._prune() and not self.closed:
            remaining = self._left_to_wait()
            if remaining <= 0:
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def _left_to_wait(self) -> float:
        """STRICT, on a pruned non-empty queue: seconds the head still waits for more
        items; 0 once the batch is full, its delay passed, or it is a describe job."""
        head = self._queue[0]
        if len(self._queue) >= self.batch_size or head.command != "predict":
            return 0.0
        return head.arrival + self.max_batch_delay - asyncio.get_running_loop().time()

    def _take(self) -> list[Pending]:
        """Pop the next batch: up to `batch_size` live items, or one describe job alone."""
        self._prune()
        batch: list[Pending] = []
        while self._queue and len(batch) < self.batch_size:
            alone = self._queue[0].command != "predict"
            if alone and batch:
                break
            batch.append(self._queue.popleft())
            if alone:
                break
        return batch

    def _watch_deadlines(self) -> None:
        """Have the head of the queue answered at its deadline even if no worker ever takes
        it (none loads): one timer per queue, armed for its head, never one per request."""
        if self._expiry is None and self._queue:
            loop = asyncio.get_running_loop()
            self._expiry = loop.call_at(self._queue[0].deadline, self._deadline_passed)

    def _deadline_passed(self) -> None:
        self._expiry = None
        self._prune()
        self._watch_deadlines()

    def _prune(self) -> int:
        """Drop cancelled and expired items (expired ones get a timeout); live count."""
        now = asyncio.get_running_loop().time()
        kept: deque[Pending] = deque()
        for item in self._queue:
            if not item.alive:
                continue
            if item.deadline <= now:
                item.future.set_exception(self.timeout_error(item, now))
                continue
            kept.append(item)
        self._queue = kept
        return len(kept)

    def timeout_error(self, item: Pending, now: float) -> RequestTimeout:
        """What a request that waited past its deadline gets."""
        waited = now - item.arrival
        return RequestTimeout(
            f'Request {item.request.request_id} to model "{self.model_name}" timed out '
            f"after waiting {waited:.3f} s for a worker."
        )


def fail(items: Iterable[Pending], error: ServeError) -> None:
    """Give each waiting client its own copy of `error`."""
    for item in items:
        if item.alive:
            item.future.set_exception(copy.copy(error))
