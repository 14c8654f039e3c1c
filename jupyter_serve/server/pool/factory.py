"""`WorkerFactory`: the server's side of the worker factory, a fork server for new workers.

A fresh worker spends most of its start in `import torch` (bench/register_timing.py
compares forked and fresh starts) and holds its own copy of torch's memory. The factory
(``python -m jupyter_serve.worker.factory``, see jupyter_serve.worker.factory)
imports torch and the handler runtime once and forks every new worker from
there: the worker starts in milliseconds and shares torch's pages with it. A fork
request names the worker's handler; for a built-in one that imports much more
(`causal_lm`: transformers), the factory imports that too on its first such fork,
and answers with the packages it now holds (`modules`), which later models' own
dependencies may then no longer shadow.

One factory per server, started on the first `fork()` (some model starting a
worker), which waits for it to be ready. `fork()` returns None, and the worker
starts fresh, when the factory cannot serve it:

* the worker runs another Python (a kernelspec's, jupyter_serve.server.kernels);
* its model's `python_path` (per-model dependencies, jupyter_serve.server.deps) holds a
  package the factory has already imported (its own torch, numpy, ...);
* the factory is dead: it is restarted with `backoff` meanwhile;
* it did not answer within `fork_timeout` (it is then killed and restarted), or
  `IMPORT_TIMEOUT` for its first fork of a handler, which may import that handler's
  modules first;
* it is not single-threaded after its warm-up (a fork could then deadlock), or
  this system has no fork server support (Linux only): then never again.

States::

    IDLE --fork()--> STARTING --hello--> READY --exit--> RESTARTING --backoff--> STARTING
                        |                                     stop() from any --> STOPPED
                        +--threads > 1--> UNUSABLE
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from enum import Enum

from jupyter_serve.server.pool.channel import Channel
from jupyter_serve.server.pool.environment import (
    python_command,
    start_dir,
    worker_command,
    worker_environment,
)
from jupyter_serve.server.pool.forked import ForkedChild, fork_supported
from jupyter_serve.server.pool.logs import WorkerLog, pump_lines
from jupyter_serve.server.pool.process import WorkerProcess, worker_socketpair
from jupyter_serve.server.pool.slots import BACKOFF
from jupyter_serve.wire import protocol
from jupyter_serve.wire.protocol import Frame, Kind

__all__ = ["FactoryState", "WorkerFactory", "shadowed"]

FACTORY_LOG = "factory"  # its lines read "[factory/<pid>] ..."
_MAX_PACKET = 64 * 1024
IMPORT_TIMEOUT = 120.0  # seconds: a fork that may first import a handler's modules


class FactoryState(Enum):
    IDLE = "IDLE"
    STARTING = "STARTING"
    READY = "READY"
    RESTARTING = "RESTARTING"
    UNUSABLE = "UNUSABLE"
    STOPPED = "STOPPED"


class WorkerFactory:
    """The fork server of workers run by `python` (default: the server's Python).

    Args:
        python: the interpreter; only workers of `worker_command(python)` are forked.
        enabled: False never starts a factory (every worker starts fresh).
        backoff: seconds before restart 1, 2, ... after a death (the last repeats);
            a factory that said hello resets the count.
        fork_timeout: seconds a fork may take before the factory counts as hung.
        stop_grace: seconds it has to exit once hung up on, before SIGKILL.
        withhold: more variables kept from it and its workers (environment.withheld).
    """

    def __init__(
        self,
        python: str = sys.executable,
        *,
        enabled: bool = True,
        backoff: Sequence[float] = BACKOFF,
        fork_timeout: float = 30.0,
        stop_grace: float = 5.0,
        withhold: Sequence[str] = (),
    ) -> None:
        self.command = worker_command(python)
        self.log = WorkerLog(FACTORY_LOG)
        self.state = FactoryState.IDLE if enabled and fork_supported() else FactoryState.UNUSABLE
        self.pid: int | None = None
        self.modules: frozenset[str] = frozenset()  # top-level packages the factory imported
        self.starts = 0  # factory processes launched
        self.pending = 0  # fork requests sent and not answered yet
        self.env: dict[str, str] = {}  # the running factory's environment
        self._python, self._withhold = python, tuple(withhold)
        self._backoff = tuple(backoff) or (0,)
        self._restarts = 0  # since the last hello
        self._fork_timeout, self._stop_grace = fork_timeout, stop_grace
        self._process: asyncio.subprocess.Process | None = None
        self._control: socket.socket | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._restart: asyncio.Task[None] | None = None
        self._answers: dict[int, asyncio.Future[int | None]] = {}
        self._exits: dict[int, asyncio.Future[int]] = {}  # forked pid -> its exit code
        self._children: dict[int, ForkedChild] = {}
        self._ids = itertools.count(1)
        self._named: set[str] = set()  # handlers the running factory was asked to fork for
        self._changed = asyncio.Event()

    async def wait_until(self, predicate: Callable[[WorkerFactory], bool]) -> None:
        """Return once `predicate(self)` holds; re-checked after every change of state."""
        while not predicate(self):
            changed = self._changed
            await changed.wait()

    # ---- forking -------------------------------------------------------------

    async def fork(
        self,
        command: Sequence[str],
        python_path: Sequence[str],
        log: WorkerLog,
        label: str,
        handler: str = "",
    ) -> WorkerProcess | None:
        """A worker forked for `command` and `python_path`, or None: start it fresh.

        `handler` (the model's handler string) lets the factory first import what a
        built-in handler needs (jupyter_serve/worker/warm.py), for a model without
        dependencies of its own: theirs might hold another copy of those packages.
        """
        if list(command) != self.command or self.state is FactoryState.UNUSABLE:
            return None
        if self.state is FactoryState.IDLE:
            await self._launch()
        await self.wait_until(lambda factory: factory.state is not FactoryState.STARTING)
        if self.state is not FactoryState.READY:
            return None
        clash = shadowed(python_path, self.modules)
        if clash:
            log.emit(label, f"Starting fresh: the model's python_path holds {', '.join(clash)}")
            return None
        return await self._ask(log, label, "" if python_path else handler)

    async def _ask(self, log: WorkerLog, label: str, handler: str) -> WorkerProcess | None:
        parent, child = worker_socketpair()
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        incarnation, env = self.starts, self.env
        pid: int | None = None
        process: WorkerProcess | None = None
        try:
            try:
                pid = await self._request([child.fileno(), out_write, err_write], handler)
            finally:
                child.close()
                _close([out_write, err_write])
            if pid is not None:
                forked = await self._adopt(pid, out_read, err_read, incarnation)
                out_read = err_read = -1  # its pipe transports own them now
                channel = await Channel.open(parent)
                forget = lambda: self._forget(forked)  # noqa: E731
                process = WorkerProcess(forked, channel, env, log, label, on_reaped=forget)
        finally:
            if process is None:  # failed or cancelled: nobody will use this worker
                parent.close()
                _close([out_read, err_read])
                self._abandon(pid)
        return process

    def _abandon(self, pid: int | None) -> None:
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        child = self._children.get(pid)
        if child is not None:
            self._forget(child)
        self._exits.pop(pid, None)

    async def _adopt(self, pid: int, out: int, err: int, incarnation: int) -> ForkedChild:
        """Watch the forked `pid`: its output, and its exit as the factory reports it."""
        exit_code = self._exits.setdefault(pid, asyncio.get_running_loop().create_future())
        forked = await ForkedChild.open(pid, out, err, exit_code)
        self._children[pid] = forked
        if incarnation != self.starts or self._control is None:
            forked.orphaned()  # its factory died meanwhile: nobody will report its exit
        return forked

    async def _request(self, fds: list[int], handler: str) -> int | None:
        """Send one fork request; the new worker's pid, or None if the factory failed."""
        control = self._control
        if control is None:
            return None
        request = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._answers[request] = answer
        self.pending += 1
        self._notify()
        try:
            header = {"id": request, "handler": handler} if handler else {"id": request}
            timeout = self._timeout_for(handler)
            socket.send_fds(control, [protocol.encode(Frame(Kind.FORK, header))], fds)
            return await asyncio.wait_for(asyncio.shield(answer), timeout)
        except asyncio.TimeoutError:
            self._note(f"No fork within {timeout:g} s: killing the factory")
            self.kill()
            return None
        except OSError as exc:  # the factory's socket is gone: it died
            self._note(f"Cannot ask the factory for a worker: {exc}")
            return None
        finally:
            self._answers.pop(request, None)
            self.pending -= 1
            self._notify()

    def _timeout_for(self, handler: str) -> float:
        """`fork_timeout`, or `IMPORT_TIMEOUT` for the first fork naming `handler`."""
        if not handler or handler in self._named:
            return self._fork_timeout
        self._named.add(handler)
        return max(self._fork_timeout, IMPORT_TIMEOUT)

    def _forget(self, child: ForkedChild) -> None:
        child.close()
        self._children.pop(child.pid, None)
        self._exits.pop(child.pid, None)

    # ---- the factory process ---------------------------------------------------

    async def _launch(self) -> None:
        self.state = FactoryState.STARTING
        self._notify()
        self.env = worker_environment(withhold=self._withhold)
        self._named.clear()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = await asyncio.create_subprocess_exec(
                *python_command(self._python, "jupyter_serve.worker.factory"),
                "--fd", str(child.fileno()), pass_fds=(child.fileno(),),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self.env, cwd=start_dir(),
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            parent.close()
            self._note(f"Cannot start the worker factory: {exc}", logging.WARNING)
            self._died()
            return
        finally:
            child.close()
        self.starts += 1
        self._process, self._control, self.pid = process, parent, process.pid
        parent.setblocking(False)
        asyncio.get_running_loop().add_reader(parent.fileno(), self._readable)
        self._tasks = [task for task in self._tasks if not task.done()]
        self._tasks += [self._pump(stream) for stream in (process.stdout, process.stderr)]
        self._tasks.append(asyncio.ensure_future(self._wait_exit(process)))
        self._note(f"Worker factory started, pid {process.pid}")
        if self.state is FactoryState.STOPPED:  # stop() ran while it was being launched
            self._close_control()
            self.kill()

    def _pump(self, stream: asyncio.StreamReader | None) -> asyncio.Task[None]:
        assert stream is not None
        label = str(self.pid)
        emit: Callable[[str], None] = lambda text: self.log.emit(label, text)  # noqa: E731
        return asyncio.ensure_future(pump_lines(stream, emit))

    def _readable(self) -> None:
        """Read every packet waiting on the control socket."""
        control = self._control
        while control is not None and control is self._control:
            try:
                data, fds, _, _ = socket.recv_fds(control, _MAX_PACKET, 1)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            _close(fds)  # the factory sends none: never keep a stray descriptor
            if not data:
                self._lost()
                return
            try:
                self._dispatch(protocol.decode_packet(data))
            except (protocol.ProtocolError, KeyError, TypeError, ValueError) as exc:
                self._note(f"Malformed packet from the factory ({exc}): killing it")
                self.kill()
                return

    def _dispatch(self, frame: Frame) -> None:
        header = frame.header
        if "exited" in header:
            exit_code = self._exits.get(int(header["exited"]))
            if exit_code is not None and not exit_code.done():
                exit_code.set_result(int(header["code"]))
        elif header.get("message") == "factory":
            self._hello(header)
        elif "id" in header:
            self._answer(header, frame.kind)

    def _hello(self, header: dict[str, object]) -> None:
        threads = header.get("threads")
        if threads != 1:
            self._note(
                f"The worker factory runs {threads} threads after its warm-up; forking it "
                "could deadlock, so every worker starts fresh",
                logging.WARNING,
            )
            self.state = FactoryState.UNUSABLE
            self._notify()
            self._close_control()  # it exits at EOF; `_wait_exit` reaps it
            return
        self._hold(header.get("modules"))
        self.state, self._restarts = FactoryState.READY, 0
        self._note(f"Worker factory ready, pid {self.pid}")
        self._notify()

    def _hold(self, modules: object) -> None:
        """The factory's `modules`, from its hello or after it imported a handler's."""
        self.modules = frozenset(map(str, modules)) if isinstance(modules, list) else frozenset()

    def _answer(self, header: dict[str, object], kind: Kind) -> None:
        if "modules" in header:
            self._hold(header["modules"])
        answer = self._answers.get(int(str(header["id"])))
        pid = header.get("pid") if kind is Kind.RESULT else None
        if not isinstance(pid, int):
            self._note(f"The factory could not fork: {header.get('message')}", logging.WARNING)
            pid = None
        if answer is None or answer.done():
            if pid is not None:  # nobody waits for it any more: do not leave it running
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return
        if pid is not None:  # its exit may be reported before the worker is adopted
            self._exits[pid] = asyncio.get_running_loop().create_future()
        answer.set_result(pid)

    def _lost(self) -> None:
        """The control socket closed: the factory is gone (its `_wait_exit` still reaps it)."""
        self._process = None
        self._close_control()
        for answer in self._answers.values():
            if not answer.done():
                answer.set_result(None)
        for child in self._children.values():
            child.orphaned()
        if self.state in (FactoryState.STARTING, FactoryState.READY):
            self._died()

    def _died(self) -> None:
        delay = self._backoff[min(self._restarts, len(self._backoff) - 1)]
        self._restarts += 1
        self.state = FactoryState.RESTARTING
        self._note(f"Worker factory gone; workers start fresh until it is back (in {delay:g} s)")
        self._restart = asyncio.ensure_future(self._restart_after(delay))
        self._notify()

    async def _restart_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        if self.state is FactoryState.RESTARTING:
            await self._launch()

    async def _wait_exit(self, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        self._note(f"Worker factory exited with code {code}")
        if self._process is process:
            self._lost()

    def _close_control(self) -> None:
        control, self._control = self._control, None
        if control is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop may be closed already
            asyncio.get_running_loop().remove_reader(control.fileno())
        control.close()

    def _note(self, text: str, level: int = logging.INFO) -> None:
        self.log.emit(str(self.pid or "-"), text, level)

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # ---- stop ----------------------------------------------------------------

    async def stop(self) -> None:
        """Stop the factory for good: hang up (it exits at EOF), SIGKILL after the grace.

        Workers it forked are not stopped here: their pools stop them.
        """
        self.state = FactoryState.STOPPED
        if self._restart is not None:
            self._restart.cancel()
        self._close_control()
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(process.wait()), self._stop_grace)
            self.kill()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for child in list(self._children.values()):
            child.close()
        self._notify()

    def kill(self) -> None:
        """SIGKILL the factory now (its death is then handled as any other)."""
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)


def shadowed(python_path: Sequence[str], modules: frozenset[str]) -> list[str]:
    """The `modules` that some folder of `python_path` also holds (sorted)."""
    found: set[str] = set()
    for folder in python_path:
        with contextlib.suppress(OSError):
            found.update(entry.split(".")[0] for entry in os.listdir(folder))
    return sorted(found & modules)


def _close(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
