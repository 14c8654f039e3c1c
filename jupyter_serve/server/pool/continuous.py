"""Continuous batching: one worker's batch as a running set of requests, stepped call by call.

TorchServe 0.12's `continuousBatching: true` (its frontend's wlm/ContinuousBatching.java):
a batch is not one handler call. Each step is one call; the handler marks, per request,
whether its answer goes on (`ts_stream_next: true`, from its `context.stopping_criteria`,
see worker/outputs.py) or ends (`false` or no header). Requests that go on stay in the
batch and are sent again at the next step with the same request id and headers but no
body (the handler keeps their state, e.g. on `context.cache`); requests that ended leave,
and requests waiting in the queue take the free places at the next step, without waiting
for the batch to drain (while requests run, only those already queued are taken: a step
never waits for company).

Each step's answer for a request that goes on is one chunk of its streamed HTTP answer
(its first one sends the status and headers); the last one ends it. The next step leaves
for the worker as soon as a step's answer says who goes on, and that answer is written to
the clients while the worker computes: the server's work overlaps the worker's, so a
request queued (or a client that left) while the answers are written counts from the step
after. A request whose
client has left (or whose client timeout passed) is dropped before the next step, so the
handler stops seeing its id and no step runs for nobody. A failed step (the handler
raised, the worker died) fails every request in the batch with its error; so does a worker
that dies between steps. When the worker is retired (scale-down, unregister) it takes no
new request but steps on until the requests it runs are answered, since their state
lives in that worker's handler.

`ContinuousBatch` is the state of one worker's running batch, fed by that worker's queue
(`Batcher.for_worker`) and settling each step with it; dispatch.py runs it in place of the
batch-by-batch loop for models with continuous batching.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

from jupyter_serve.server.batching import Batcher, Pending, fail
from jupyter_serve.server.pool.delivery import pass_chunk, stream, with_queue_ms
from jupyter_serve.server.pool.logs import LOGGER
from jupyter_serve.server.pool.worker import SubprocessWorker, WorkerReply, WorkerState
from jupyter_serve.wire.errors import ServeError
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult

__all__ = ["STREAM_NEXT", "ContinuousBatch", "goes_on"]

STREAM_NEXT = "ts_stream_next"

_SERVING = (WorkerState.READY, WorkerState.BUSY)
Record = Callable[[WorkerReply, int, float], None]


def goes_on(result: InferenceResult) -> bool:
    """Whether a step's result leaves its request in the batch: TorchServe keeps a request
    unless its `ts_stream_next` is absent or exactly "false"."""
    value = result.headers.get(STREAM_NEXT)
    return value is not None and value != "false"


@dataclass(eq=False)
class Running:
    """A request in the batch; `continuing` once a step answered that it goes on."""

    item: Pending
    continuing: bool = False

    def step_request(self) -> InferenceRequest:
        """What the next step sends: the request, or, continuing, its id and headers alone."""
        request = self.item.request
        if not self.continuing:
            return request
        return InferenceRequest(request.request_id, request.headers)


class Step(NamedTuple):
    """A step sent to the worker: its answer to come, its requests, when it left, and the
    mean queue time of the requests that joined with it."""

    reply: asyncio.Future[WorkerReply]
    items: list[Pending]
    dispatched: float
    queue_ms: float


@dataclass(eq=False)
class ContinuousBatch:
    """One worker's running batch of at most `capacity` requests (module docstring)."""

    worker: SubprocessWorker
    batcher: Batcher
    capacity: int
    record: Record | None = None
    running: dict[str, Running] = field(default_factory=dict)

    async def serve(
        self,
        next_batch: Callable[[], Awaitable[list[Pending] | None]],
        taking: Callable[[], bool],
    ) -> None:
        """Step until the worker dies, or until `taking()` is false and the batch is empty.

        `next_batch` waits for the first requests when the batch is empty (None: it was
        interrupted); `taking` says whether new requests may join. As soon as a step's
        answer tells who goes on, the next step leaves for the worker; the answer is
        written to the clients while the worker computes it.
        """
        step: Step | None = None
        try:
            while self.worker.state in _SERVING:  # BUSY: the step sent last runs
                if step is None:
                    joining = await self._joining(next_batch, taking())
                    if joining is None and not self.running:
                        return
                    step = self._launch(joining or [])
                answered = await self._answer(step)
                step = None
                if self.worker.state is WorkerState.READY:
                    step = self._next_step(taking())
                answered()
        finally:
            if step is not None:
                step.reply.cancel()
            self.fail_all(ServeError("Worker died.", status_code=500))

    async def _joining(
        self, next_batch: Callable[[], Awaitable[list[Pending] | None]], taking: bool
    ) -> list[Pending] | None:
        if not taking:
            return None
        return self.batcher.take_ready() or await next_batch()

    def _next_step(self, taking: bool) -> Step | None:
        """The next step at once, with the requests queued now, if any request runs."""
        self._drop_departed()
        if not self.running:
            return None
        free = self.capacity - len(self.running)
        return self._launch(self.batcher.take_now(free) if taking else [])

    def _launch(self, joining: list[Pending]) -> Step:
        """Send one step: the running requests (continuing ones without their bodies), then
        `joining`."""
        for item in joining:
            self.running[item.request.request_id] = Running(item)
        entries = list(self.running.values())
        items = [entry.item for entry in entries]
        dispatched = asyncio.get_running_loop().time()
        queue_ms = sum(dispatched - item.arrival for item in joining) * 1000 \
            / max(len(joining), 1)  # fmt: skip
        requests = [entry.step_request() for entry in entries]
        reply = self.worker.dispatch(requests, "predict", partial(stream, items))
        return Step(reply, items, dispatched, queue_ms)

    async def _answer(self, step: Step) -> Callable[[], None]:
        """Wait for a step; update who runs; return what writes its answers."""
        items, dispatched, queue_ms = step.items, step.dispatched, step.queue_ms
        try:
            reply = await step.reply
        except ServeError as error:
            self.fail_all(error)
            return lambda: None
        except asyncio.CancelledError:
            self.fail_all(ServeError("Worker died.", status_code=500))
            raise
        except Exception as exc:  # a bug here must not leave clients waiting forever
            LOGGER.exception("Step on worker %s failed", self.worker.id)
            self.fail_all(ServeError(f"Internal error while running the batch: {exc!r}"))
            return lambda: None
        results = self.batcher.settle(items, reply.results)
        deliveries = self._advance(results)

        def write() -> None:
            for item, result, last in deliveries:
                if last:
                    if item.alive:
                        queued = (dispatched - item.arrival) * 1000
                        item.future.set_result(with_queue_ms(result, queued))
                else:
                    pass_chunk(item, result)
            if self.record is not None:
                self.record(reply, len(items), queue_ms)

        return write

    def _advance(
        self, results: list[InferenceResult]
    ) -> list[tuple[Pending, InferenceResult, bool]]:
        """Who goes on and who is done after a step: (request, its result, whether it is
        its last), the running set updated."""
        deliveries = []
        for result in results:
            entry = self.running.get(result.request_id)
            if entry is None:
                continue  # not a request of this batch: nothing waits for it
            last = not goes_on(result)
            if last:
                del self.running[result.request_id]
            else:
                entry.continuing = True
            deliveries.append((entry.item, result, last))
        return deliveries

    def _drop_departed(self) -> None:
        """Forget requests whose client left or timed out: the next step leaves them out."""
        for request_id in [rid for rid, entry in self.running.items() if not entry.item.alive]:
            del self.running[request_id]

    def fail_all(self, error: ServeError) -> None:
        """Every running request gets `error` (a copy each); the batch is empty after."""
        items = [entry.item for entry in self.running.values()]
        self.running.clear()
        self.batcher.settle(items, [])
        fail(items, error)
