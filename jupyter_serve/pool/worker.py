"""`SubprocessWorker`: one worker process, its socket, its output and its life cycle.

The worker is a fresh interpreter (`<python> -m jupyter_serve.worker --fd N`)
talking jupyter_serve.protocol over one end of a `socket.socketpair()` passed
with `pass_fds`. It runs in its own session (process group), so stopping it
also stops whatever processes its handler started.

States::

    STARTING --R(200) to L--> READY <--> BUSY (a batch in flight)
        |                       |
        +--exit / load error--> DEAD         stop() from any state --> STOPPED

Times are seconds (`spec.startup_timeout`, `spec.response_timeout`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import TYPE_CHECKING, Any

from .. import protocol
from .._version import __version__
from ..errors import ServeError
from ..protocol import Frame, InferenceRequest, InferenceResult, Kind
from .channel import Channel, ChunkCallback, Disconnected
from .errors import BatchFailed, WorkerDied, WorkerLoadError
from .logs import WorkerLog, pump_lines
from .stats import rss_bytes, torchserve_time

if TYPE_CHECKING:
    from ..models import ModelSpec

__all__ = ["SubprocessWorker", "WorkerReply", "WorkerState", "next_worker_id"]

_ids = itertools.count(9000)
_EXIT_WAIT = 2.0  # seconds to collect the exit code after the socket closed
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
    ) -> None:
        self.spec = spec
        self.torch_threads = torch_threads or spec.torch_threads
        self.id = next_worker_id()
        self.gpu_id = gpu_id
        self.state = WorkerState.STARTING
        self.pid: int | None = None
        self.start_time = datetime.now(timezone.utc)
        self.returncode: int | None = None
        self._command = list(command)
        self._log = log
        self._extra_env = dict(env or {})
        self._on_exit = on_exit
        self._tail: deque[str] = deque(maxlen=20)
        self._process: asyncio.subprocess.Process | None = None
        self._channel: Channel | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._exited = asyncio.Event()
        self._killed = False

    def __repr__(self) -> str:
        return (
            f"<SubprocessWorker {self.spec.model_name}/{self.id} pid={self.pid} {self.state.name}>"
        )

    @property
    def alive(self) -> bool:
        """Loaded and serving (READY or BUSY)."""
        return self.state in (WorkerState.READY, WorkerState.BUSY)

    # ---- start and load ------------------------------------------------------

    async def start(self) -> None:
        """Spawn the process and load the model; READY on return.

        Raises:
            WorkerLoadError: no `R(200)` within `spec.startup_timeout` (E frame, exit, timeout).
        """
        await self._spawn()
        await self._load()

    async def _spawn(self) -> None:
        parent, child = socket.socketpair()
        try:
            self._process = await asyncio.create_subprocess_exec(
                *self._argv(child.fileno()),
                pass_fds=(child.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._environment(),
                start_new_session=True,
                limit=1 << 20,
            )
        except OSError as exc:
            parent.close()
            self.state = WorkerState.DEAD
            raise WorkerLoadError(f"Cannot start worker {self._command!r}: {exc}") from exc
        finally:
            child.close()
        self.pid = self._process.pid
        self.start_time = datetime.now(timezone.utc)
        self._channel = await Channel.open(parent)
        self._watch(self._process)
        self._note(f"Worker started, pid {self.pid}, gpu {self.gpu_id}")

    def _argv(self, fd: int) -> list[str]:
        argv = [*self._command, "--fd", str(fd)]
        if self.torch_threads:
            argv += ["--torch-threads", str(self.torch_threads)]
        return argv

    def _environment(self) -> dict[str, str]:
        from ..kernels import worker_pythonpath

        env = dict(os.environ)
        paths = [worker_pythonpath(), *self.spec.python_path]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["PYTHONUNBUFFERED"] = "1"  # handler prints reach the log line by line
        if self.torch_threads:  # OpenMP/MKL pools sized before torch starts (a user's own wins)
            env.setdefault("OMP_NUM_THREADS", str(self.torch_threads))
            env.setdefault("MKL_NUM_THREADS", str(self.torch_threads))
        env.update(self._extra_env)
        return env

    def _watch(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        assert process.stderr is not None
        streams = ((process.stdout, logging.INFO), (process.stderr, logging.WARNING))
        for stream, level in streams:
            pump = pump_lines(stream, self._log, self.id, level, self._tail)
            self._tasks.append(asyncio.ensure_future(pump))
        self._tasks.append(asyncio.ensure_future(self._wait_exit(process)))

    async def _wait_exit(self, process: asyncio.subprocess.Process) -> None:
        self.returncode = await process.wait()
        if self.state is not WorkerState.STOPPED:
            self.state = WorkerState.DEAD
        self._note(f"Worker exited with code {self.returncode}")
        self._exited.set()
        if self._on_exit is not None:
            self._on_exit(self)

    async def _load(self) -> None:
        timeout = self.spec.startup_timeout
        request = protocol.encode(Frame(Kind.LOAD, self._load_header()))
        try:
            reply = await asyncio.wait_for(self._connected().exchange(request), timeout)
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

    def _load_header(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "model_name": spec.model_name,
            "model_dir": spec.model_dir,
            "handler": spec.handler,
            "gpu_id": None if self.gpu_id is None else 0,  # CUDA_VISIBLE_DEVICES: its cuda:0
            "batch_size": spec.batch_size,
            "limit_max_image_pixels": spec.limit_max_image_pixels,
            "server_version": __version__,
            "model_yaml_config": spec.model_yaml_config,
            "decode_input_request": spec.decode_input_request,
        }

    def _check_loaded(self, reply: Frame) -> None:
        header = reply.header
        if reply.kind is Kind.ERROR:
            self.state = WorkerState.DEAD
            raise WorkerLoadError(
                str(header.get("message") or "Worker failed to load the model"),
                status_code=507 if header.get("status") == 507 else 500,
                traceback=str(header.get("traceback") or ""),
            )
        if reply.kind is not Kind.RESULT or header.get("status") != 200:
            self.kill()
            raise WorkerLoadError(f"Worker {self.id} answered the load request with {header!r}")

    def _exit_message(self, code: int | None) -> str:
        last = self._tail[-1] if self._tail else "no output"
        return (
            f"Worker {self.id} exited with code {code} while loading model "
            f"{self.spec.model_name}; last output: {last}"
        )

    def output_tail(self) -> str:
        """The worker's last output lines (up to 20), for error messages."""
        return "\n".join(self._tail)

    # ---- predict -------------------------------------------------------------

    async def predict(
        self,
        batch: Sequence[InferenceRequest],
        command: str = "predict",
        on_chunk: ChunkCallback | None = None,
    ) -> WorkerReply:
        """Run one batch within `spec.response_timeout`.

        A streaming handler's intermediate results go to `on_chunk` as they arrive.
        The timeout covers the whole batch, streamed chunks included (it does not
        restart on each chunk), as TorchServe's does.

        Raises:
            WorkerDied: the worker exited (507 if SIGKILLed from outside) or hung
                past the timeout (it is then killed; 500).
            BatchFailed: the worker answered with an `E` frame; it keeps serving.
        """
        if self.state is not WorkerState.READY:
            raise WorkerDied(f"Worker {self.id} is {self.state.name}, not READY.")
        try:
            data = protocol.encode(protocol.encode_infer(list(batch), command))
        except protocol.ProtocolError as exc:  # over 4 GiB: the worker is fine
            raise ServeError(f"Batch too large to send: {exc}", status_code=413) from exc
        self.state = WorkerState.BUSY
        try:
            frame = await self._predict_frame(data, on_chunk)
        finally:
            if self.state is WorkerState.BUSY:
                self.state = WorkerState.READY
        if frame.kind is Kind.ERROR:
            raise BatchFailed.from_header(frame.header)
        return self._reply(frame)

    async def _predict_frame(self, request: bytes, on_chunk: ChunkCallback | None) -> Frame:
        timeout = self.spec.response_timeout
        try:
            return await asyncio.wait_for(self._connected().exchange(request, on_chunk), timeout)
        except asyncio.TimeoutError:
            self._note(f"No answer within response_timeout ({timeout:g} s): killing the worker")
            self.kill()
            raise WorkerDied() from None
        except Disconnected:
            code = await self._exit_code()
            raise WorkerDied(status_code=self._death_status(code)) from None

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

    def _connected(self) -> Channel:
        if self._channel is None:
            raise Disconnected("socket closed")
        return self._channel

    async def _exit_code(self) -> int | None:
        """The exit code once the process ended; kill it if it lingers without its socket."""
        try:
            await asyncio.wait_for(self._exited.wait(), _EXIT_WAIT)
        except asyncio.TimeoutError:
            self._note("Worker closed its socket but did not exit: killing it")
            self.kill()
            await self._exited.wait()
        return self.returncode

    # ---- stop ----------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL the worker and its process group at once (no grace)."""
        self._killed = True
        if self.state is not WorkerState.STOPPED:
            self.state = WorkerState.DEAD
        self._signal(signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        process = self._process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)  # its own session: the pgid is its pid

    async def stop(self, grace: float = 5.0) -> None:
        """Close the socket, SIGTERM, SIGKILL after `grace` s; return once all is reaped.

        Cancelled meanwhile, it SIGKILLs at once and still reaps before re-raising,
        so no process outlives a cancelled stop.
        """
        if self.state is not WorkerState.DEAD:
            self.state = WorkerState.STOPPED
        try:
            await self._close_socket()
            await self._terminate(grace)
        except asyncio.CancelledError:
            self.kill()
            await self._reap(grace)
            raise
        await self._reap(grace)

    async def _close_socket(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    async def _terminate(self, grace: float) -> None:
        if self._process is None:
            return
        self._signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self._exited.wait(), grace)
        except asyncio.TimeoutError:
            self._note(f"Worker still running {grace:g} s after SIGTERM: killing it")
            self.kill()
            await self._exited.wait()

    async def _reap(self, grace: float) -> None:
        """Wait for the output pumps; a grandchild holding the pipes open is not waited for."""
        if not self._tasks:
            return
        _, lingering = await asyncio.wait(self._tasks, timeout=grace)
        for task in lingering:
            task.cancel()
        await asyncio.gather(*lingering, return_exceptions=True)

    def _note(self, text: str) -> None:
        self._log.emit(self.id, text)

    # ---- describe ------------------------------------------------------------

    def memory_usage(self) -> int:
        """Resident set size of the worker process in bytes (0 once it is gone)."""
        if self.pid is None or self.returncode is not None:
            return 0
        return rss_bytes(self.pid)

    def describe(self) -> dict[str, Any]:
        """TorchServe's worker object in the describe-model JSON."""
        from ..devices import gpu_usage

        return {
            "id": self.id,
            "startTime": torchserve_time(self.start_time),
            "status": "READY" if self.alive else "UNLOADING",
            "memoryUsage": self.memory_usage(),
            "pid": -1 if self.pid is None else self.pid,
            "gpu": self.gpu_id is not None,
            "gpuUsage": gpu_usage(self.gpu_id),
        }
