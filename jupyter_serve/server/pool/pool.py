"""`WorkerPool`: keeps N workers of one model version alive and feeds them batches.

Each worker has a *slot*: a supervisor task that starts a worker, runs its
dispatch loop (`batch = await batcher.next_batch(); await worker.predict(batch)`)
while it lives, stops it, waits the next backoff delay and starts a new one.
The backoff (TorchServe's Fibonacci seconds, 0 to 1597) is reset by every
successful load. Slot k gets the k-th GPU of `devices.assign_devices`, so GPU
workers stay round-robin across restarts and scaling.

Intermediate results a streaming handler sends while a batch runs go to each
request's `on_chunk` sink as they arrive (`delivery.stream`); `responseTimeout`
still bounds the whole batch, streaming included.

Scaling down retires the newest slots: an idle worker stops at once, a busy one
after its batch. `stop()` stops every worker now; batches in flight then fail
with 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from jupyter_serve.server import devices
from jupyter_serve.server.batching import Batcher, no_worker_message
from jupyter_serve.server.pool.cores import cpu_threads_per_worker
from jupyter_serve.server.pool.dispatch import Dispatch
from jupyter_serve.server.pool.errors import WorkerLoadError
from jupyter_serve.server.pool.logs import LOGGER, WorkerLog
from jupyter_serve.server.pool.process import worker_command
from jupyter_serve.server.pool.slots import (
    BACKOFF,
    LoadCallback,
    MetricsCallback,
    ScaleResult,
    Slot,
)
from jupyter_serve.server.pool.worker import SubprocessWorker, WorkerReply, WorkerState
from jupyter_serve.wire.errors import BadRequest, ServeError, ServiceUnavailable
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult

if TYPE_CHECKING:
    from jupyter_serve.server.models import ModelSpec
    from jupyter_serve.server.pool.factory import WorkerFactory

__all__ = ["BACKOFF", "LoadCallback", "MetricsCallback", "ScaleResult", "WorkerPool"]


class WorkerPool:
    """The workers of one model version, pulling batches from its `Batcher`.

    Args:
        spec: the model version.
        batcher: its queue.
        command: the worker command before "--fd N"; default
            `worker_command(spec.python)`: `[spec.python, "-P", "-m", "jupyter_serve.worker"]`.
        backoff: seconds to wait before restart number 1, 2, ... (the last repeats).
        on_metrics: called after each answered predict batch (see `MetricsCallback`).
        on_load: called after each worker's successful load (see `LoadCallback`).
        log_buffer: the ring buffer for the model's worker output (kept across pools).
        gpu_count: how many GPUs are visible (asked once, when the first worker starts).
        stop_grace: seconds between SIGTERM and SIGKILL when stopping a worker.
        factory: the server's worker factory, which forks new workers when it can.
        withhold: more variables kept from the workers (environment.withheld).
    """

    def __init__(
        self,
        spec: ModelSpec,
        batcher: Batcher,
        *,
        command: Sequence[str] | None = None,
        backoff: Sequence[float] = BACKOFF,
        on_metrics: MetricsCallback | None = None,
        on_load: LoadCallback | None = None,
        log_buffer: deque[str] | None = None,
        gpu_count: Callable[[], int] = devices.gpu_count,
        stop_grace: float = 5.0,
        factory: WorkerFactory | None = None,
        withhold: Sequence[str] = (),
    ) -> None:
        self.spec = spec
        self.batcher = batcher
        self.command = list(command or worker_command(spec.python))
        self.min_workers = 0
        self.max_workers = 0
        self.log = WorkerLog(spec.model_name, log_buffer)
        self.last_load_failure: WorkerLoadError | None = None  # the newest failed load
        self._backoff = tuple(backoff) or (0,)
        self._on_metrics = on_metrics
        self._on_load = on_load
        self._gpu_count = gpu_count
        self._visible: int | None = None
        self._stop_grace = stop_grace
        self._factory, self._withhold = factory, tuple(withhold)
        self._slots: list[Slot] = []
        self._retired: set[Slot] = set()
        self._changed = asyncio.Event()
        self._stopped = False

    # ---- public view ---------------------------------------------------------

    @property
    def workers(self) -> list[dict[str, Any]]:
        """TorchServe's describe objects of the workers starting or serving (not restarting)."""
        gone = (WorkerState.DEAD, WorkerState.STOPPED)
        current = (slot.worker for slot in self._slots)
        return [w.describe() for w in current if w is not None and w.state not in gone]

    @property
    def healthy_count(self) -> int:
        """Workers loaded and serving (READY or BUSY)."""
        return sum(1 for slot in self._slots if slot.worker is not None and slot.worker.alive)

    @property
    def ping_healthy_count(self) -> int:
        """Workers TorchServe's `/ping` counts as healthy (`WorkerThread.isHealthy`).

        A worker is healthy unless it has been failing (dead, restarting, failing to
        load) for `maxRetryTimeoutInSec` or longer since it last loaded; one still
        loading for the first time counts, as in TorchServe.
        """
        now, window = time.monotonic(), self.spec.max_retry_timeout
        return sum(
            1
            for slot in self._slots
            if slot.failing_since is None or now - slot.failing_since < window
        )

    @property
    def worker_count(self) -> int:
        """Workers the pool keeps (the target), whether or not they are up right now."""
        return len(self._slots)

    @property
    def processes(self) -> list[SubprocessWorker]:
        """Workers whose process runs, including retiring ones still finishing a batch."""
        workers = (slot.worker for slot in [*self._slots, *self._retired])
        return [w for w in workers if w is not None and w.pid is not None and w.returncode is None]

    @property
    def running_count(self) -> int:
        """Requests running in the workers' continuous batches (continuous.py), those of
        retiring workers stepping on included; 0 without continuous batching."""
        slots = [*self._slots, *self._retired]
        return sum(len(slot.batch.running) for slot in slots if slot.batch is not None)

    def recent_logs(self, limit: int | None = None) -> list[str]:
        """The model's newest worker output lines, oldest first."""
        return self.log.recent(limit)

    async def wait_until(self, predicate: Callable[[WorkerPool], bool]) -> None:
        """Return once `predicate(self)` holds; re-checked after every worker state change."""
        while not predicate(self):
            changed = self._changed
            await changed.wait()

    # ---- scaling -------------------------------------------------------------

    async def scale(
        self, min_workers: int, max_workers: int | None = None, *, wait: bool = True
    ) -> ScaleResult:
        """Start or stop workers until `min_workers` run.

        With `wait`, return once new workers loaded (or failed their first load)
        and removed workers stopped; otherwise return right after scheduling.
        """
        max_workers = min_workers if max_workers is None else max_workers
        if min_workers < 0:
            raise BadRequest(f"min_worker must be >= 0, got {min_workers}.")
        if max_workers < min_workers:
            raise BadRequest("max_worker cannot be less than min_worker.")
        if self._stopped:
            raise ServiceUnavailable(f"The worker pool of {self.spec.model_name} is stopped.")
        gpus = [self._gpu_for(index) for index in range(len(self._slots), min_workers)]
        self.min_workers, self.max_workers = min_workers, max_workers
        added = [self._add_slot(gpu) for gpu in gpus]
        removed = [self._retire(self._slots.pop()) for _ in range(len(self._slots) - min_workers)]
        self._notify()
        if not wait:
            return ScaleResult(min_workers, len(added), len(removed), waited=False)
        outcomes = await asyncio.gather(*(slot.first_load for slot in added))
        await asyncio.gather(
            *(s.task for s in removed if s.task is not None), return_exceptions=True
        )
        failures = tuple(error for error in outcomes if error is not None)
        return ScaleResult(min_workers, len(added) - len(failures), len(removed), failures)

    async def stop(self) -> None:
        """Stop every worker (in-flight batches fail with 503); no process is left running."""
        self._stopped = True
        slots = [*self._slots, *self._retired]
        self._slots.clear()
        for slot in slots:
            slot.retiring = True
            if slot.task is not None:
                slot.task.cancel()
        await asyncio.gather(*(s.task for s in slots if s.task is not None), return_exceptions=True)
        self._notify()

    async def predict_one(
        self, request: InferenceRequest, command: str = "describe"
    ) -> InferenceResult:
        """Run one request alone on some worker (describe jobs); 503 without a worker."""
        if self.healthy_count == 0:
            job = "describe" if command == "describe" else "inference"
            raise ServiceUnavailable(no_worker_message(self.spec.model_name, job=job))
        deadline = asyncio.get_running_loop().time() + self.spec.response_timeout
        return await self.batcher.submit(request, deadline, command=command)

    def _add_slot(self, gpu_id: int | None) -> Slot:
        loop = asyncio.get_running_loop()
        slot = Slot(gpu_id=gpu_id, first_load=loop.create_future())
        self._slots.append(slot)
        slot.task = asyncio.ensure_future(self._supervise(slot))
        return slot

    def _retire(self, slot: Slot) -> Slot:
        slot.retiring = True
        slot.attention.set()
        self._retired.add(slot)
        worker = slot.worker
        if slot.task is not None and (worker is None or worker.state is WorkerState.STARTING):
            slot.task.cancel()  # nothing in flight: no need to wait for a load to finish
        return slot

    def _gpu_for(self, index: int) -> int | None:
        """Slot `index`'s GPU by `devices.assign_devices` (BadRequest for unknown deviceIds)."""
        if self._visible is None:
            self._visible = self._gpu_count()
        spec = self.spec
        ids = devices.assign_devices(
            1, spec.device_type, spec.device_ids, self._visible, start=index
        )
        return ids[0]

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # ---- one slot's life -----------------------------------------------------

    async def _supervise(self, slot: Slot) -> None:
        restarts = 0  # since the last successful load
        try:
            while not slot.retiring:
                if await self._run_worker(slot):
                    restarts = 0
                if slot.retiring:
                    break
                await self._pause(slot, self._backoff[min(restarts, len(self._backoff) - 1)])
                restarts += 1
        finally:
            if not slot.first_load.done():
                slot.first_load.set_result(WorkerLoadError("Worker stopped before it loaded."))
            self._retired.discard(slot)
            self._notify()

    async def _run_worker(self, slot: Slot) -> bool:
        """Start one worker in `slot`, serve with it until it dies; True if it loaded."""
        worker = SubprocessWorker(
            self.spec,
            self.command,
            self.log,
            gpu_id=slot.gpu_id,
            env=devices.worker_env(slot.gpu_id, gpus=self._visible),
            torch_threads=self.spec.torch_threads
            or cpu_threads_per_worker(len(self._slots), streaming=self.spec.continuous_batching),
            burst_threads=self.spec.torch_threads or cpu_threads_per_worker(len(self._slots)),
            on_exit=lambda exited: self._worker_exited(slot, exited),
            factory=self._factory,
            withhold=self._withhold,
        )
        slot.worker = worker
        try:
            if not await self._load(slot, worker):
                return False
            slot.failing_since = None
            await self._serve(slot, worker)
            return True
        finally:
            if not slot.retiring and slot.failing_since is None:
                slot.failing_since = time.monotonic()
            await worker.stop(self._stop_grace)
            self._notify()

    async def _load(self, slot: Slot, worker: SubprocessWorker) -> bool:
        self._notify()
        outcome = await self._start(worker)
        if outcome is None:
            self._loaded(worker)
        elif self.healthy_count == 0:  # TorchServe's answer to what waits for this worker
            self.batcher.fail_queued(ServeError("Worker died.", status_code=500))
        if not slot.first_load.done():
            slot.first_load.set_result(outcome)
        self._notify()
        return outcome is None

    async def _start(self, worker: SubprocessWorker) -> WorkerLoadError | None:
        try:
            await worker.start()
        except WorkerLoadError as error:
            self.log.emit(worker.id, f"Load failed: {error.message}", logging.WARNING)
            self.last_load_failure = error
            return error
        except Exception as exc:  # a bug must not end the slot: report it, back off, retry
            LOGGER.exception("Starting worker %s failed", worker.id)
            self.last_load_failure = WorkerLoadError(f"Cannot start worker {worker.id}: {exc!r}")
            return self.last_load_failure
        return None

    async def _pause(self, slot: Slot, delay: float) -> None:
        """Wait the backoff `delay` before a restart, cut short if the slot is retired."""
        if delay <= 0:
            return
        self.log.emit("pool", f"Restarting a worker in {delay:g} s")
        slot.attention.clear()
        if slot.retiring:
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(slot.attention.wait(), delay)

    def _worker_exited(self, slot: Slot, worker: SubprocessWorker) -> None:
        if slot.worker is worker:
            slot.attention.set()
        self._notify()

    # ---- dispatch ------------------------------------------------------------

    async def _serve(self, slot: Slot, worker: SubprocessWorker) -> None:
        """The dispatch loop (dispatch.py): batches for `worker` until it dies or retires."""
        await Dispatch(self.batcher, worker, slot, self.spec, self._record).serve()

    def _loaded(self, worker: SubprocessWorker) -> None:
        if self._on_load is None:
            return
        try:
            self._on_load(self.spec, worker.name, worker.load_ms, worker.load_metrics)
        except Exception:  # metrics must never break serving
            LOGGER.exception("on_load failed for %s", self.spec.model_name)

    def _record(self, reply: WorkerReply, batch_len: int, queue_ms: float) -> None:
        if self._on_metrics is None:
            return
        try:
            self._on_metrics(self.spec, reply.metrics, reply.predict_ms, batch_len, queue_ms)
        except Exception:  # metrics must never break serving
            LOGGER.exception("on_metrics failed for %s", self.spec.model_name)
