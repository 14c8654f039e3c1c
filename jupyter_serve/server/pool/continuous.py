"""Continuous batching: one worker's batch as a running set of requests that the worker steps.

TorchServe 0.12's `continuousBatching: true` (its frontend's wlm/ContinuousBatching.java):
a batch is not one handler call. Each step is one call; the handler marks, per request,
whether its answer goes on (`ts_stream_next: true`, from its `context.stopping_criteria`,
see worker/outputs.py) or ends (`false` or no header). Requests that go on stay in the
batch and are stepped again with the same request id and headers but no body (the handler
keeps their state, e.g. on `context.cache`); requests that ended leave, and requests
waiting in the queue take the free places, without waiting for the batch to drain (while
requests run, only those already queued are taken: a step never waits for company).

The worker steps the batch on its own (jupyter_serve/worker/steps.py: one "steps" run per
busy spell): a step follows the last at once, with no round trip through the server in
between. Each step's answer reaches `_stepped` here: an answer that goes on is one chunk of
its request's streamed HTTP answer (its first one sends the status and headers), the last
one ends it. Then, before those answers are written (the worker is already on its next
step), the requests queued meanwhile join the run (a request queued while the run has a
free place joins as it arrives, in time for the worker's next step) and the requests
whose client left (or whose client timeout passed) leave it: the handler stops seeing
their ids, so no step runs for nobody. Joins go ahead of free places: up to a step's
worth more requests wait in the worker, which gives a place a step frees to one of them at
the very next step. Once a step leaves nothing running and no join is
on its way, the run ends, and the next request starts a new one.

A failed step (the handler raised) fails every request of the run with its error; so does
a worker that dies. When the worker is retired (scale-down, unregister) it takes no new
request but steps on until the requests it runs are answered, since their state lives in
that worker's handler.

`ContinuousBatch` is the state of one worker's run, fed by that worker's queue
(`Batcher.for_worker`) and settling each step with it; dispatch.py runs it in place of the
batch-by-batch loop for models with continuous batching.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from jupyter_serve.server.batching import Batcher, BatcherClosed, Pending, fail
from jupyter_serve.server.pool.delivery import pass_chunk, stream, with_queue_ms
from jupyter_serve.server.pool.logs import LOGGER
from jupyter_serve.server.pool.worker import SubprocessWorker, WorkerReply, WorkerState
from jupyter_serve.wire.errors import ServeError
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult, StreamChunk, goes_on

__all__ = ["ContinuousBatch"]

Record = Callable[[WorkerReply, int, float], None]


@dataclass(eq=False)
class Running:
    """A request in the run (the worker holds what it goes on with) and when it joined."""

    item: Pending
    joined: float


@dataclass(eq=False)
class ContinuousBatch:
    """One worker's running batch of at most `capacity` requests a step (module docstring)."""

    worker: SubprocessWorker
    batcher: Batcher
    capacity: int
    record: Record | None = None
    running: dict[str, Running] = field(default_factory=dict)
    taking: Callable[[], bool] = field(default=lambda: True)
    queue_ms: float = 0.0  # the mean queue time of the last requests that joined
    ending: bool = False  # the run's "end" was sent: steps still on their way only answer
    stepped: asyncio.Event = field(default_factory=asyncio.Event)  # a step's answer came

    @property
    def room(self) -> int:
        """The most requests in the worker's hands: a step's worth running and as many
        waiting there for a place (worker/steps.py `Room`)."""
        return 2 * self.capacity

    async def serve(
        self,
        next_batch: Callable[[], Awaitable[list[Pending] | None]],
        taking: Callable[[], bool],
    ) -> None:
        """Run after run until the worker dies, or until `taking()` is false and the run
        ended. `next_batch` waits for the first requests of a run (None: it was
        interrupted); `taking` says whether new requests may join."""
        self.taking = taking
        try:
            while self.worker.state is WorkerState.READY and taking():
                joining = await next_batch()
                if joining is None:
                    return
                await self._run(self._join(joining))
        finally:
            self.fail_all(ServeError("Worker died.", status_code=500))

    def _join(self, joining: list[Pending]) -> list[InferenceRequest]:
        """Add `joining` to the run; what the worker gets of them."""
        now = asyncio.get_running_loop().time()
        for item in joining:
            self.running[item.request.request_id] = Running(item, now)
        self.queue_ms = sum(now - item.arrival for item in joining) * 1000 / max(len(joining), 1)
        return [item.request for item in joining]

    async def _run(self, first: list[InferenceRequest]) -> None:
        """One run of the worker's, to its end (every step answered through `_stepped`)."""
        self.ending = False
        arrivals = asyncio.ensure_future(self._join_arrivals())
        try:
            await self.worker.start_run(first, self.capacity, self._stepped, self._chunk)
        except ServeError as error:
            self.fail_all(error)
        except asyncio.CancelledError:
            self.fail_all(ServeError("Worker died.", status_code=500))
            raise
        except Exception as exc:  # a bug here must not leave clients waiting forever
            LOGGER.exception("Run on worker %s failed", self.worker.id)
            self.fail_all(ServeError(f"Internal error while running the batch: {exc!r}"))
        finally:
            arrivals.cancel()

    async def _join_arrivals(self) -> None:
        """While the run has free places, a request queued joins at once (it reaches the
        worker before its next step); with none free (or none takeable), the next step's
        answer decides (`_steer`)."""
        try:
            while not self.ending:
                await self.batcher.wait_first()
                if not self._join_queued():
                    self.stepped.clear()
                    await self.stepped.wait()
        except BatcherClosed:
            return

    def _stepped(self, reply: WorkerReply | ServeError) -> None:
        """A step's answer: who goes on and who is done; joins and leaves for the steps to
        come; then the answers are written."""
        self.stepped.set()
        if isinstance(reply, ServeError):
            self.fail_all(reply)
            self._end()
            return
        items = [self.running[r.request_id].item for r in reply.results
                 if r.request_id in self.running]  # fmt: skip
        deliveries = self._advance(self.batcher.settle(items, reply.results))
        if not self.ending:
            self._steer()
        for item, result, joined, last in deliveries:
            if not last:
                pass_chunk(item, result)
            elif item.alive:
                item.future.set_result(with_queue_ms(result, (joined - item.arrival) * 1000))
        if self.record is not None:
            self.record(reply, len(items), self.queue_ms)

    def _steer(self) -> None:
        """Between steps: departed requests leave, queued ones join, or the run ends."""
        self._leave_departed()
        if not self._join_queued() and not self.running:
            self._end()

    def _join_queued(self) -> bool:
        """Send the requests queued now that fit in the worker's hands; whether any went."""
        free = self.room - len(self.running)
        joining = self.batcher.take_now(free) if self.taking() and not self.ending else []
        if joining:
            self.worker.control("join", self._join(joining))
        return bool(joining)

    def _end(self) -> None:
        """Send the run's one "end" (steps on their way, e.g. of requests that left, may
        still come; they join nothing)."""
        if not self.ending:
            self.ending = True
            self.worker.control("end")

    def _chunk(self, chunk: StreamChunk) -> None:
        """Intermediate results a handler streams within a step."""
        stream([entry.item for entry in self.running.values()], chunk)

    def _advance(
        self, results: list[InferenceResult]
    ) -> list[tuple[Pending, InferenceResult, float, bool]]:
        """Who goes on and who is done after a step: (request, its result, when it joined,
        whether it is its last), the running set updated."""
        deliveries = []
        for result in results:
            entry = self.running.get(result.request_id)
            if entry is None:
                continue  # left the run already: nothing waits for it
            last = not goes_on(result.headers)
            if last:
                del self.running[result.request_id]
            deliveries.append((entry.item, result, entry.joined, last))
        return deliveries

    def _leave_departed(self) -> None:
        """Requests whose client left or timed out leave the run before its next step."""
        gone = [entry for entry in self.running.values() if not entry.item.alive]
        for entry in gone:
            del self.running[entry.item.request.request_id]
        if gone:
            self.worker.control("leave", [InferenceRequest(e.item.request.request_id, {})
                                          for e in gone])  # fmt: skip

    def fail_all(self, error: ServeError) -> None:
        """Every running request gets `error` (a copy each); the run is empty after."""
        items = [entry.item for entry in self.running.values()]
        self.running.clear()
        self.batcher.settle(items, [])
        fail(items, error)
