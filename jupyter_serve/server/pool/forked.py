"""`ForkedChild`: a worker the worker factory forked, seen the way a launched process is.

`process.WorkerProcess` drives a worker through what `asyncio.subprocess.Process`
offers: `pid`, `returncode`, `stdout`, `stderr` and `wait()`. A forked worker is
the factory's child, not the server's: its output arrives on pipes the server
made (and handed to the factory with the fork request), and its exit code comes
from the factory, which reaps it and reports it (`exited`). If the factory dies
first, the worker is orphaned (re-parented to init) and nobody can read its exit
code any more: `orphaned()` then watches it through a pidfd and reports
`LOST_EXIT_CODE` once it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

from jupyter_serve.server.pool.logs import READ_LIMIT

__all__ = ["LOST_EXIT_CODE", "ForkedChild", "fork_supported"]

LOST_EXIT_CODE = 255  # an orphan's exit: its code went to init, not to us


def fork_supported() -> bool:
    """Linux with pidfds (5.3+): what forking workers and watching orphans need."""
    if not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


class ForkedChild:
    """One forked worker: its pid, its output streams and its exit (make one with `open`)."""

    def __init__(
        self,
        pid: int,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        transports: list[asyncio.BaseTransport],
        exit_code: asyncio.Future[int],
    ) -> None:
        self.pid = pid
        self.stdout: asyncio.StreamReader | None = stdout
        self.stderr: asyncio.StreamReader | None = stderr
        self._transports = transports
        self._exit = exit_code
        self._pidfd: int | None = None

    @classmethod
    async def open(
        cls, pid: int, stdout_fd: int, stderr_fd: int, exit_code: asyncio.Future[int]
    ) -> ForkedChild:
        """Read the worker's output from the read ends of its pipes (this takes them over)."""
        out, out_transport = await _pipe_reader(stdout_fd)
        err, err_transport = await _pipe_reader(stderr_fd)
        return cls(pid, out, err, [out_transport, err_transport], exit_code)

    @property
    def returncode(self) -> int | None:
        """The exit code once the worker exited (`LOST_EXIT_CODE` for an orphan), else None."""
        if not self._exit.done() or self._exit.cancelled():
            return None
        return self._exit.result()

    async def wait(self) -> int:
        """Wait for the exit and return its code."""
        return await asyncio.shield(self._exit)

    def orphaned(self) -> None:
        """The factory died: watch the worker ourselves, as nobody will report its exit."""
        if self._exit.done() or self._pidfd is not None:
            return
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            self._gone()
            return
        asyncio.get_running_loop().add_reader(self._pidfd, self._gone)

    def _gone(self) -> None:
        self._forget_pidfd()
        if not self._exit.done():
            self._exit.set_result(LOST_EXIT_CODE)

    def close(self) -> None:
        """Close the output pipes and any pidfd (the worker has been reaped or abandoned)."""
        self._forget_pidfd()
        for transport in self._transports:
            transport.close()

    def _forget_pidfd(self) -> None:
        if self._pidfd is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop may be closed already
            asyncio.get_running_loop().remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = None


async def _pipe_reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=READ_LIMIT, loop=loop)
    pipe = open(fd, "rb", buffering=0)  # noqa: SIM115 (the transport owns and closes it)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream, loop=loop), pipe
        )
    except BaseException:
        pipe.close()
        raise
    return stream, transport
