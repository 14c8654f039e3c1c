"""`WorkerProcess`: one worker process, its socket, its output and its exit.

A launched worker is `<python> -m jupyter_serve.worker --fd N [args]`: a fresh
interpreter talking jupyter_serve.wire.protocol over one end of a
`socket.socketpair()` passed with `pass_fds`, in its own session (process
group), so stopping it also stops whatever processes its handler started. A
forked worker (the worker factory's child, `forked.ForkedChild`) is the same
from here on: its own session, the same socket and output pipes.

This module knows processes, not models: `SubprocessWorker` (worker.py) drives
the protocol on top of it, and `WorkerFactory` (factory.py) forks workers from a
warm interpreter. Output lines go to a `WorkerLog` under the worker's label.
What a worker starts with (its command, working directory and environment,
`worker_environment` and `env_changes`) is environment.py's, re-exported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

from jupyter_serve.server.pool.channel import Channel, ChunkCallback, StepCallback
from jupyter_serve.server.pool.environment import (
    env_changes,
    start_dir,
    worker_command,
    worker_environment,
)
from jupyter_serve.server.pool.logs import READ_LIMIT, WorkerLog, pump_lines
from jupyter_serve.server.pool.stats import rss_bytes
from jupyter_serve.wire.protocol import Buffer, Frame

__all__ = [
    "ProcessHandle",
    "WorkerProcess",
    "env_changes",
    "worker_command",
    "worker_environment",
]

_EXIT_WAIT = 2.0  # seconds to collect the exit code after the socket closed


SOCKET_BUFFER_BYTES = 8 << 20


def worker_socketpair() -> tuple[socket.socket, socket.socket]:
    """The server's and the worker's ends of a new worker's socket.

    Each end may queue up to `SOCKET_BUFFER_BYTES` (the kernel caps it at
    net.core.wmem_max), so a batch of large bodies (a CNN's 8 x 600 KB) leaves in a
    few sends rather than one 208 KB default buffer at a time, each waking the
    worker: measured here, that cut the server's CPU per CNN request (batch 8, two
    workers) from 0.95 to 0.58 ms.
    """
    parent, child = socket.socketpair()
    for end in (parent, child):
        with contextlib.suppress(OSError):
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
    return parent, child


class ProcessHandle(Protocol):
    """What `WorkerProcess` needs of a process: `asyncio.subprocess.Process` has it."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    stdout: asyncio.StreamReader | None
    stderr: asyncio.StreamReader | None

    async def wait(self) -> int: ...


class WorkerProcess:
    """A running worker process (launch one with `launch`; the factory forks others).

    Attributes:
        pid, start_time, env: the process id, when it was launched, its environment.
        returncode: its exit code once it exited, else None.
        exited: set once the process exited (after `on_exit` ran).
        on_exit: called once with this process when it has exited.
        tail: the last output lines (up to 20), for error messages.
    """

    def __init__(
        self,
        process: ProcessHandle,
        channel: Channel,
        env: Mapping[str, str],
        log: WorkerLog,
        label: str,
        on_reaped: Callable[[], None] | None = None,
    ) -> None:
        self.pid = process.pid
        self.start_time = datetime.now(timezone.utc)
        self.env = dict(env)
        self.returncode: int | None = None
        self.exited = asyncio.Event()
        self.on_exit: Callable[[WorkerProcess], None] | None = None
        self.tail: deque[str] = deque(maxlen=20)
        self._process = process
        self._channel = channel
        self._log, self._label = log, label
        self._on_reaped = on_reaped
        self._tasks = [*self._pumps(process), asyncio.ensure_future(self._wait_exit())]

    @classmethod
    async def launch(
        cls,
        command: Sequence[str],
        env: Mapping[str, str],
        log: WorkerLog,
        label: str,
        args: Sequence[str] = (),
    ) -> WorkerProcess:
        """Start `command --fd N *args` with `env`.

        Raises:
            OSError: the command cannot be started.
        """
        parent, child = worker_socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                *command,
                "--fd",
                str(child.fileno()),
                *args,
                pass_fds=(child.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(env),
                cwd=start_dir(),
                start_new_session=True,
                limit=READ_LIMIT,
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        try:
            channel = await Channel.open(parent)
        except BaseException:
            parent.close()
            raise
        return cls(process, channel, env, log, label)

    @property
    def alive(self) -> bool:
        """Running, as far as the event loop knows, with its socket still open."""
        return self.returncode is None and not self._channel.at_eof()

    def note(self, text: str, level: int = logging.INFO) -> None:
        """One line of this process's log, under its current label."""
        self._log.emit(self._label, text, level)

    def _pumps(self, process: ProcessHandle) -> list[asyncio.Task[None]]:
        assert process.stdout is not None
        assert process.stderr is not None
        streams = ((process.stdout, logging.INFO), (process.stderr, logging.WARNING))
        return [
            asyncio.ensure_future(pump_lines(stream, self._line(level), self.tail))
            for stream, level in streams
        ]

    def _line(self, level: int) -> Callable[[str], None]:
        return lambda text: self.note(text, level)

    async def _wait_exit(self) -> None:
        """Record the exit; `exited` is set even if this watch is cancelled (loop closing)."""
        try:
            self.returncode = await self._process.wait()
            self.note(f"Worker exited with code {self.returncode}")
            if self.on_exit is not None:
                self.on_exit(self)
        finally:
            self.exited.set()

    # ---- frames --------------------------------------------------------------

    async def exchange(
        self, parts: Sequence[Buffer], on_chunk: ChunkCallback | None = None
    ) -> Frame:
        """Send one frame (`frame_parts`) and read the answer (streamed chunks go to `on_chunk`).

        Raises:
            Disconnected: the socket failed, closed or carried a malformed frame.
        """
        return await self._channel.exchange(parts, on_chunk)

    def begin_exchange(
        self,
        parts: Sequence[Buffer],
        on_chunk: ChunkCallback | None = None,
        on_step: StepCallback | None = None,
    ) -> Coroutine[Any, Any, Frame]:
        """`exchange` with its frame written before returning (channel.Channel.begin_exchange)."""
        return self._channel.begin_exchange(parts, on_chunk, on_step)

    def send(self, parts: Sequence[Buffer]) -> None:
        """Write a frame no answer follows (channel.Channel.send)."""
        self._channel.send(parts)

    async def exit_code(self) -> int | None:
        """The exit code once the process ended; kill it if it lingers without its socket."""
        try:
            await asyncio.wait_for(self.exited.wait(), _EXIT_WAIT)
        except asyncio.TimeoutError:
            self.note("Worker closed its socket but did not exit: killing it")
            self.signal(signal.SIGKILL)
            await self.exited.wait()
        return self.returncode

    # ---- stop ----------------------------------------------------------------

    def signal(self, signum: int) -> None:
        """Send `signum` to the process group (nothing once the process exited)."""
        if self._process.returncode is not None:
            return
        try:
            os.killpg(self._process.pid, signum)  # its own session: the pgid is its pid
        except ProcessLookupError:  # a forked worker not yet in its own session
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, signum)

    async def stop(self, grace: float = 5.0) -> None:
        """Close the socket, SIGTERM, SIGKILL after `grace` s; return once all is reaped.

        Cancelled meanwhile, it SIGKILLs at once and still reaps before re-raising,
        so no process outlives a cancelled stop.
        """
        try:
            await self._close_socket()
            await self._terminate(grace)
        except asyncio.CancelledError:
            self.signal(signal.SIGKILL)
            await self._reap(grace)
            raise
        await self._reap(grace)

    async def _close_socket(self) -> None:
        await self._channel.close()

    async def _terminate(self, grace: float) -> None:
        self.signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.exited.wait(), grace)
        except asyncio.TimeoutError:
            self.note(f"Worker still running {grace:g} s after SIGTERM: killing it")
            self.signal(signal.SIGKILL)
            await self.exited.wait()
        if self.returncode is None:  # the exit watch was cancelled, not the process seen gone
            self.signal(signal.SIGKILL)

    async def _reap(self, grace: float) -> None:
        """Wait for the exit and the output pumps; a grandchild holding the pipes open is not."""
        _, lingering = await asyncio.wait(self._tasks, timeout=grace)
        for task in lingering:
            task.cancel()
        await asyncio.gather(*lingering, return_exceptions=True)
        if self._on_reaped is not None:
            self._on_reaped()

    def memory_usage(self) -> int:
        """Resident set size in bytes (0 once the process is gone)."""
        return 0 if self.returncode is not None else rss_bytes(self.pid)
