"""`SubprocessWorker`: one worker of one model version, its load and its batches.

The process itself (`<python> -m jupyter_serve.worker --fd N`, its socket, its
output, signals and reaping) is a `process.WorkerProcess`; this class speaks the
protocol over it and keeps the worker's state. `start()` has the server's
`WorkerFactory` fork the process when it can (factory.py says when it cannot),
else launches a fresh interpreter. Either way the `L` frame (load_frame.py) carries
what differs per worker and must be in place before the handler is imported: the
model's `python_path` (`sys_path`), the environment a fresh process would have
been launched with (`env`, as changes: none for a fresh one) and the torch
thread count (`torch_threads`).

States::

    STARTING --R(200) to L--> READY <--> BUSY (a batch in flight)
        |                       |
        +--exit / load error--> DEAD         stop() from any state --> STOPPED

Times are seconds (`spec.startup_timeout`, `spec.response_timeout`).
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING, Any

from jupyter_serve.server.pool.channel import ChunkCallback, Disconnected, StepCallback
from jupyter_serve.server.pool.environment import env_changes, worker_environment
from jupyter_serve.server.pool.errors import BatchFailed, WorkerDied, WorkerLoadError
from jupyter_serve.server.pool.load_frame import UnexpectedAnswer, load_header, loaded_metrics
from jupyter_serve.server.pool.logs import WorkerLog
from jupyter_serve.server.pool.process import WorkerProcess
from jupyter_serve.server.pool.stats import torchserve_time
from jupyter_serve.wire import protocol
from jupyter_serve.wire.errors import ServeError
from jupyter_serve.wire.protocol import Buffer, Frame, InferenceRequest, InferenceResult, Kind

if TYPE_CHECKING:
    from jupyter_serve.server.models import ModelSpec
    from jupyter_serve.server.pool.factory import WorkerFactory

__all__ = ["SubprocessWorker", "WorkerReply", "WorkerState", "next_worker_id"]

_ids = itertools.count(9000)
_OOM_EXIT_CODES = (137, -signal.SIGKILL)  # SIGKILL from outside (OOM killer): 507


def next_worker_id() -> str:
    """Process-wide worker ids "9000", "9001", ... (TorchServe names workers by port)."""
    return str(next(_ids))


class WorkerState(Enum):
    STARTING = "STARTING"
    READY = "READY"
    BUSY = "BUSY"
    DEAD = "DEAD"
    STOPPED = "STOPPED"


@dataclass(frozen=True)
class WorkerReply:
    """A worker's `R` frame answering a batch."""

    results: list[InferenceResult]
    metrics: list[dict[str, Any]]
    predict_ms: float


class SubprocessWorker:
    """One worker process serving one model version.

    Args:
        spec: the model version to load.
        command: the interpreter command; "--fd N" (and "--torch-threads K") are appended.
        log: where output lines and lifecycle events go.
        gpu_id: the server-side GPU id, None for a CPU worker.
        env: extra environment (devices.worker_env) over the server's.
        on_exit: called once with this worker when its process has exited.
        torch_threads: torch threads of the worker (default `spec.torch_threads`).
        burst_threads: the threads its handler may take for a short heavy pass (a
            prompt's prefill) when the server's core is free (server/pool/cores.py).
        factory: the server's worker factory, asked to fork the process first.
        withhold: more variables kept from the worker (environment.withheld).
    """

    def __init__(
        self,
        spec: ModelSpec,
        command: Sequence[str],
        log: WorkerLog,
        *,
        gpu_id: int | None = None,
        env: Mapping[str, str] | None = None,
        on_exit: Callable[[SubprocessWorker], None] | None = None,
        torch_threads: int | None = None,
        burst_threads: int | None = None,
        factory: WorkerFactory | None = None,
        withhold: Sequence[str] = (),
    ) -> None:
        self.spec = spec
        self.torch_threads = torch_threads or spec.torch_threads
        self.burst_threads = burst_threads  # None: its torch_threads (load_frame.py)
        self.id = next_worker_id()
        self.gpu_id = gpu_id
        self.state = WorkerState.STARTING
        self.pid: int | None = None
        self.start_time = datetime.now(timezone.utc)  # the process's, once there is one
        self.forked = False  # the process came from the worker factory
        self.load_ms = 0.0  # start to loaded (TorchServe's WorkerLoadTime)
        self.load_metrics: list[dict[str, Any]] = []  # what the handler's initialize emitted
        self._command = list(command)
        self._log = log
        self._extra_env, self._withhold = dict(env or {}), tuple(withhold)
        self._on_exit = on_exit
        self._factory = factory
        self._process: WorkerProcess | None = None
        self._killed = False
        self._timer: asyncio.TimerHandle | None = None  # the response timeout in flight

    def __repr__(self) -> str:
        return (
            f"<SubprocessWorker {self.spec.model_name}/{self.id} pid={self.pid} {self.state.name}>"
        )

    @property
    def name(self) -> str:
        """TorchServe's worker name, `W-<id>-<model>_<version>` (its thread and metric label)."""
        return f"W-{self.id}-{self.spec.model_name}_{self.spec.version}"

    @property
    def alive(self) -> bool:
        """Loaded and serving (READY or BUSY)."""
        return self.state in (WorkerState.READY, WorkerState.BUSY)

    @property
    def returncode(self) -> int | None:
        """The process's exit code once it exited, else None."""
        return None if self._process is None else self._process.returncode

    # ---- start and load ------------------------------------------------------

    async def start(self) -> None:
        """Fork or launch the process, then load the model; READY on return.

        Raises:
            WorkerLoadError: no `R(200)` within `spec.startup_timeout` (E frame, exit, timeout).
        """
        started = time.monotonic()
        env = worker_environment(
            self.spec.python_path, self.torch_threads, self._extra_env, self._withhold
        )
        forked = await self._fork()
        process = forked or await self._launch(env)
        self._attach(process, forked=forked is not None)
        await self._load(env_changes(process.env, env))
        self.load_ms = (time.monotonic() - started) * 1000

    async def _fork(self) -> WorkerProcess | None:
        if self._factory is None:
            return None
        spec = self.spec
        return await self._factory.fork(
            self._command, spec.python_path, self._log, self.id, spec.handler
        )

    async def _launch(self, env: dict[str, str]) -> WorkerProcess:
        args = ["--torch-threads", str(self.torch_threads)] if self.torch_threads else []
        try:
            return await WorkerProcess.launch(self._command, env, self._log, self.id, args)
        except OSError as exc:
            self.state = WorkerState.DEAD
            raise WorkerLoadError(f"Cannot start worker {self._command!r}: {exc}") from exc

    def _attach(self, process: WorkerProcess, *, forked: bool) -> None:
        self._process, self.pid, self.start_time = process, process.pid, process.start_time
        self.forked = forked
        process.on_exit = self._process_exited
        how = "forked" if forked else "started"
        self._note(f"Worker {how}, pid {self.pid}, gpu {self.gpu_id}")

    def _process_exited(self, process: WorkerProcess) -> None:
        if self.state is not WorkerState.STOPPED:
            self.state = WorkerState.DEAD
        if self._on_exit is not None:
            self._on_exit(self)

    async def _load(self, env: dict[str, str | None]) -> None:
        timeout = self.spec.startup_timeout
        header = load_header(self.spec, self.gpu_id, env, self.torch_threads, self.burst_threads)
        request = protocol.frame_parts(Kind.LOAD, header, ())
        try:
            reply = await asyncio.wait_for(self._exchange(request), timeout)
        except asyncio.TimeoutError:
            self.kill()
            raise WorkerLoadError(
                f"Worker {self.id} did not load model {self.spec.model_name} "
                f"within startup_timeout ({timeout:g} s)."
            ) from None
        except Disconnected:
            code = await self._exit_code()
            raise WorkerLoadError(self._exit_message(code), traceback=self.output_tail()) from None
        self._check_loaded(reply)
        self.state = WorkerState.READY

    def _check_loaded(self, reply: Frame) -> None:
        try:
            self.load_metrics = loaded_metrics(reply, self.id)
        except UnexpectedAnswer:
            self.kill()
            raise
        except WorkerLoadError:
            self.state = WorkerState.DEAD
            raise

    def _exit_message(self, code: int | None) -> str:
        tail = self._process.tail if self._process is not None else ()
        last = tail[-1] if tail else "no output"
        return (
            f"Worker {self.id} exited with code {code} while loading model "
            f"{self.spec.model_name}; last output: {last}"
        )

    def output_tail(self) -> str:
        """The worker's last output lines (up to 20), for error messages."""
        return "\n".join(self._process.tail) if self._process is not None else ""

    # ---- predict -------------------------------------------------------------

    async def predict(
        self,
        batch: Sequence[InferenceRequest],
        command: str = "predict",
        on_chunk: ChunkCallback | None = None,
    ) -> WorkerReply:
        """Run one batch within `spec.response_timeout` (`dispatch`, awaited)."""
        return await self.dispatch(batch, command, on_chunk)

    def dispatch(
        self,
        batch: Sequence[InferenceRequest],
        command: str = "predict",
        on_chunk: ChunkCallback | None = None,
        on_step: StepCallback | None = None,
        **header: Any,
    ) -> asyncio.Future[WorkerReply]:
        """Send one batch to the worker before returning; its answer to come.

        A streaming handler's intermediate results go to `on_chunk` as they arrive.
        The timeout covers the whole batch, streamed chunks included (it does not
        restart on each chunk), as TorchServe's does. The frame is on the worker's
        socket when this returns, so what the caller does next overlaps the batch.

        The future raises:
            WorkerDied: the worker exited (507 if SIGKILLed from outside), hung past the
                timeout (it is then killed; 500) or was not READY.
            BatchFailed: the worker answered with an `E` frame; it keeps serving.
            ServeError: the batch is too large to send (413); the worker is fine.
        """
        loop = asyncio.get_running_loop()
        try:
            parts = self._batch_parts(batch, command, header)
        except ServeError as exc:
            failed: asyncio.Future[WorkerReply] = loop.create_future()
            failed.set_exception(exc)
            return failed
        assert self._process is not None
        self.state = WorkerState.BUSY
        answer = self._process.begin_exchange(parts, on_chunk, on_step)
        reply = asyncio.ensure_future(self._answer(answer))
        reply.add_done_callback(partial(self._settled, answer))  # before any awaiter's
        return reply

    def start_run(
        self,
        batch: Sequence[InferenceRequest],
        capacity: int,
        on_step: Callable[[WorkerReply | ServeError], None],
        on_chunk: ChunkCallback | None = None,
    ) -> asyncio.Future[WorkerReply]:
        """Start a continuous batch the worker steps on its own (the protocol's "steps"
        command) with `batch`, at most `capacity` requests a step; each step's answer goes
        to `on_step`: a `WorkerReply`, or the `ServeError` of a step that failed (the run
        then waits for "end"). `control` sends joins, leaves and the end; the future is the
        run's end, raising as `dispatch`'s. The response timeout applies to each step: each
        answer restarts it.
        """
        return self.dispatch(batch, "steps", on_chunk, partial(self._stepped, on_step),
                             capacity=capacity)  # fmt: skip

    def control(self, command: str, batch: Sequence[InferenceRequest] = ()) -> None:
        """Send a running "steps" run a "join" (new requests), "leave" (requests by id whose
        client left) or "end" (nothing runs any more)."""
        if self._process is not None and self.state is WorkerState.BUSY:
            self._process.send(protocol.encode_infer_parts(list(batch), command))

    def _stepped(self, on_step: Callable[[WorkerReply | ServeError], None], frame: Frame) -> None:
        self._arm_timeout()
        error = frame.header.get("error")
        if isinstance(error, dict):
            on_step(BatchFailed.from_header(error))
            return
        try:
            reply = self._reply(frame)
        except WorkerDied as died:
            on_step(died)
            return
        on_step(reply)

    def _batch_parts(
        self, batch: Sequence[InferenceRequest], command: str, header: dict[str, Any]
    ) -> list[Buffer]:
        if self.state is not WorkerState.READY:
            raise WorkerDied(f"Worker {self.id} is {self.state.name}, not READY.")
        try:
            return protocol.encode_infer_parts(list(batch), command, **header)
        except protocol.ProtocolError as exc:  # over 4 GiB: the worker is fine
            raise ServeError(f"Batch too large to send: {exc}", status_code=413) from exc

    async def _answer(self, answer: Coroutine[Any, Any, Frame]) -> WorkerReply:
        self._arm_timeout()
        try:
            frame = await answer
        except Disconnected:
            code = await self._exit_code()
            raise WorkerDied(status_code=self._death_status(code)) from None
        finally:
            if self._timer is not None:
                self._timer.cancel()
        if frame.kind is Kind.ERROR:
            raise BatchFailed.from_header(frame.header)
        return self._reply(frame)

    def _settled(self, answer: Coroutine[Any, Any, Frame], _: object) -> None:
        answer.close()  # unstarted if the reply was cancelled before it ran
        if self.state is WorkerState.BUSY:
            self.state = WorkerState.READY

    def _arm_timeout(self) -> None:
        """(Re)start the response timeout of the batch (or step) in flight."""
        if self._timer is not None:
            self._timer.cancel()
        timeout = self.spec.response_timeout
        self._timer = asyncio.get_running_loop().call_later(timeout, self._hung, timeout)

    def _hung(self, timeout: float) -> None:
        self._note(f"No answer within response_timeout ({timeout:g} s): killing the worker")
        self.kill()

    def _reply(self, frame: Frame) -> WorkerReply:
        try:
            results = protocol.decode_results(frame)
        except (protocol.ProtocolError, KeyError, TypeError, ValueError) as exc:
            self._note(f"Malformed result frame ({exc}): killing the worker")
            self.kill()
            raise WorkerDied() from exc
        metrics = frame.header.get("metrics") or []
        return WorkerReply(results, list(metrics), float(frame.header.get("predict_ms") or 0.0))

    def _death_status(self, code: int | None) -> int:
        return 507 if code in _OOM_EXIT_CODES and not self._killed else 500

    async def _exchange(
        self, parts: Sequence[Buffer], on_chunk: ChunkCallback | None = None
    ) -> Frame:
        assert self._process is not None
        return await self._process.exchange(parts, on_chunk)

    async def _exit_code(self) -> int | None:
        assert self._process is not None
        return await self._process.exit_code()

    # ---- stop ----------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL the worker and its process group at once (no grace)."""
        self._killed = True
        if self.state is not WorkerState.STOPPED:
            self.state = WorkerState.DEAD
        if self._process is not None:
            self._process.signal(signal.SIGKILL)

    async def stop(self, grace: float = 5.0) -> None:
        """Close the socket, SIGTERM, SIGKILL after `grace` s; return once all is reaped.

        Cancelled meanwhile, it SIGKILLs at once and still reaps before re-raising,
        so no process outlives a cancelled stop.
        """
        if self.state is not WorkerState.DEAD:
            self.state = WorkerState.STOPPED
        if self._process is not None:
            await self._process.stop(grace)

    def _note(self, text: str) -> None:
        self._log.emit(self.id, text)

    # ---- describe ------------------------------------------------------------

    def memory_usage(self) -> int:
        """Resident set size of the worker process in bytes (0 once it is gone)."""
        return 0 if self._process is None else self._process.memory_usage()

    def describe(self) -> dict[str, Any]:
        """TorchServe's worker object in the describe-model JSON."""
        from jupyter_serve.server.devices import gpu_usage

        return {
            "id": self.id,
            "startTime": torchserve_time(self.start_time),
            "status": "READY" if self.alive else "UNLOADING",
            "memoryUsage": self.memory_usage(),
            "pid": -1 if self.pid is None else self.pid,
            "gpu": self.gpu_id is not None,
            "gpuUsage": gpu_usage(self.gpu_id),
        }
