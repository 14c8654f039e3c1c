"""One worker's dispatch loop: take a batch from its queue, run it on the worker, deliver.

`Dispatch.serve` runs for as long as its worker is READY and its slot is not retired.
Its queue is the model's `Batcher` as this worker sees it (`Batcher.for_worker`: the
shared queue, or, for sequence batching, the sequences pinned to this worker,
server/sequences.py); each answered batch is settled with it before delivery
(`Batcher.settle`), and the queue is released when the loop ends. A model with
continuous batching is stepped instead (continuous.py), at most `batchSize` requests
running, twice that with sequences as well (TorchServe's sequence_continuous_batching).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

from jupyter_serve.server.batching import Batcher, BatcherClosed, Pending, fail
from jupyter_serve.server.models import ModelSpec
from jupyter_serve.server.pool.continuous import ContinuousBatch
from jupyter_serve.server.pool.delivery import deliver, stream
from jupyter_serve.server.pool.logs import LOGGER
from jupyter_serve.server.pool.slots import Slot
from jupyter_serve.server.pool.worker import SubprocessWorker, WorkerReply, WorkerState
from jupyter_serve.wire.errors import ServeError, ServiceUnavailable, no_worker_message

__all__ = ["Dispatch"]

Record = Callable[[WorkerReply, int, float], None]


class Dispatch:
    """Feeds one worker from its queue until the worker dies or its slot retires."""

    def __init__(self, batcher: Batcher, worker: SubprocessWorker, slot: Slot,
                 spec: ModelSpec, record: Record) -> None:  # fmt: skip
        self.batcher = batcher
        self.queue = batcher.for_worker(worker)
        self.worker = worker
        self.slot = slot
        self.spec = spec
        self.record = record

    async def serve(self) -> None:
        try:
            if self.spec.continuous_batching:
                await self._step()
            else:
                await self._batches()
        except BatcherClosed:
            self.slot.retiring = True  # the model is going away: wind down
        finally:
            self.batcher.release(self.queue)

    async def _batches(self) -> None:
        while self.worker.state is WorkerState.READY and not self.slot.retiring:
            batch = self.queue.take_ready() or await self.next_batch()
            if batch is not None:
                await self.run_batch(batch)

    async def _step(self) -> None:
        capacity = self.spec.batch_size * (2 if self.spec.sequence_batching else 1)
        running = ContinuousBatch(self.worker, self.queue, capacity, self.record)
        self.slot.batch = running  # the pool counts its requests (WorkerPool.running_count)
        try:
            await running.serve(self._next_run, lambda: not self.slot.retiring)
        finally:
            if self.slot.batch is running:
                self.slot.batch = None

    async def _next_run(self) -> list[Pending] | None:
        """The first requests of a continuous batch's next run (None: interrupted); a
        describe job on the way, which travels alone, is answered as a plain batch."""
        while True:
            batch = self.queue.take_ready() or await self.next_batch()
            if batch is None or batch[0].command == "predict":
                return batch
            await self.run_batch(batch)
            if self.worker.state is not WorkerState.READY:
                return None

    async def next_batch(self) -> list[Pending] | None:
        """The next batch, or None when interrupted (the worker died, the slot retired)."""
        slot = self.slot
        slot.attention.clear()  # the caller just saw READY and not retiring
        getter = asyncio.ensure_future(self.queue.next_batch())
        interrupt = asyncio.ensure_future(slot.attention.wait())
        try:
            await asyncio.wait((getter, interrupt), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self._abandon(getter)
            raise
        finally:
            interrupt.cancel()
        if getter.done() and self.worker.state is WorkerState.READY and not slot.retiring:
            return getter.result()
        self._abandon(getter)
        return None

    def _abandon(self, getter: asyncio.Future[list[Pending]]) -> None:
        """Cancel a pending `next_batch`, or put back the batch it already took."""
        if not getter.done():
            getter.cancel()
        elif not getter.cancelled() and getter.exception() is None:
            self.queue.requeue(getter.result())

    async def run_batch(self, batch: list[Pending]) -> None:
        dispatched = asyncio.get_running_loop().time()
        queue_ms = sum(dispatched - item.arrival for item in batch) * 1000 / len(batch)
        try:
            requests = [item.request for item in batch]
            reply = await self.worker.predict(requests, batch[0].command, partial(stream, batch))
        except ServeError as error:
            self._fail(batch, error)
            return
        except asyncio.CancelledError:
            self._fail(batch, ServiceUnavailable(no_worker_message(self.spec.model_name)))
            raise
        except Exception as exc:  # a bug here must not leave clients waiting forever
            LOGGER.exception("Batch on worker %s failed", self.worker.id)
            self._fail(batch, ServeError(f"Internal error while running the batch: {exc!r}"))
            return
        results = self.queue.settle(batch, reply.results)
        deliver(batch, WorkerReply(results, reply.metrics, reply.predict_ms), dispatched)
        if batch[0].command == "predict":
            self.record(reply, len(batch), queue_ms)

    def _fail(self, batch: list[Pending], error: ServeError) -> None:
        self.queue.settle(batch, [])
        fail(batch, error)
