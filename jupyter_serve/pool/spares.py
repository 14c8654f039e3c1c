"""`SparePool`: idle worker processes with torch already imported, for new workers to adopt.

A fresh worker spends most of its start in `import torch` (1.6 to 2.2 s here,
tech-notes.md). A spare is a worker launched ahead of need with ``--spare``: it
imports torch (when installed) and the handler runtime, answers one
``R {"message": "spare", "modules": [...]}`` frame, and waits for its `L` frame,
which then carries what a fresh worker would have got at launch (its model's
`sys.path` entries, environment and torch threads; see `SubprocessWorker`).

One pool per server, shared by every model. It keeps up to `size` spares of
the default worker command (the server's Python). Nothing is launched before
the first `take()` for that command (some model starting a worker); every such
`take()` refills in the background. A spare that exits while it waits is
dropped and never handed out; it is replaced at the next `take()`, so a spare
that cannot start costs at most one launch per worker start. `stop()` stops
them all; `kill()` is the last resort when the event loop is gone.

Lifecycle of one spare::

    launched --R "spare"--> ready --take()--> adopted (no longer the pool's)
        |                     |
        +---- exit -----------+--> dropped            stop() --> stopped
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..protocol import Kind
from .channel import Disconnected
from .logs import WorkerLog
from .process import WorkerProcess, worker_command, worker_environment
from .worker import next_worker_id

__all__ = ["SPARE_LOG", "SparePool"]

SPARE_LOG = "spare"  # output lines read "[spare/<id>] ..." until a model adopts the process


@dataclass(eq=False)
class _Spare:
    process: WorkerProcess
    ready: bool = False
    modules: frozenset[str] = frozenset()  # top-level packages the spare has imported
    waiter: asyncio.Task[None] | None = field(default=None, repr=False)


class SparePool:
    """Up to `size` warm spare workers of `command` (default: the server's Python).

    Args:
        size: how many idle spares to keep; 0 launches none, ever.
        command: the worker command before "--fd N"; only workers of this exact
            command adopt a spare.
        stop_grace: seconds between SIGTERM and SIGKILL when stopping a spare.
    """

    def __init__(
        self, size: int, command: Sequence[str] | None = None, *, stop_grace: float = 5.0
    ) -> None:
        self.size = max(0, size)
        self.command = list(command or worker_command(sys.executable))
        self.log = WorkerLog(SPARE_LOG)
        self.launched = 0
        self._stop_grace = stop_grace
        self._spares: list[_Spare] = []
        self._closed = False
        self._filling: asyncio.Task[None] | None = None
        self._cleanups: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()

    # ---- public view ---------------------------------------------------------

    @property
    def pids(self) -> list[int]:
        """Process ids of the spares the pool holds, warming up or ready."""
        return [spare.process.pid for spare in self._spares]

    @property
    def ready_pids(self) -> list[int]:
        """Process ids of the spares a worker could adopt right now."""
        return [spare.process.pid for spare in self._spares if self._usable(spare)]

    async def wait_until(self, predicate: Callable[[SparePool], bool]) -> None:
        """Return once `predicate(self)` holds; re-checked after every spare state change."""
        while not predicate(self):
            changed = self._changed
            await changed.wait()

    # ---- taking --------------------------------------------------------------

    def take(self, command: Sequence[str], python_path: Sequence[str] = ()) -> WorkerProcess | None:
        """A ready spare for a worker of `command` with `python_path`, or None (start cold).

        Every call for this command (re)fills the pool in the background. A model
        whose `python_path` holds a package the spare already imported (its own
        torch, numpy, ...) gets None: an imported module cannot be swapped.
        """
        if list(command) != self.command:
            return None  # another Python: a spare would not fit, so none is started for it
        self._activate()
        spare = next((s for s in self._spares if self._usable(s)), None)
        if spare is None:
            return None
        clash = _shadowed(python_path, spare.modules)
        if clash:
            spare.process.note(f"Not adopted: the model's python_path holds {', '.join(clash)}")
            return None
        self._spares.remove(spare)
        spare.process.on_exit = None
        self._notify()
        return spare.process

    def _activate(self) -> None:
        if self.size == 0 or self._closed:
            return
        if self._filling is None or self._filling.done():
            self._filling = asyncio.ensure_future(self._fill())

    @staticmethod
    def _usable(spare: _Spare) -> bool:
        return spare.ready and spare.process.alive

    # ---- filling -------------------------------------------------------------

    async def _fill(self) -> None:
        while not self._closed and len(self._spares) < self.size:
            if not await self._launch():
                return

    async def _launch(self) -> bool:
        label = next_worker_id()
        env = worker_environment()
        try:
            process = await WorkerProcess.launch(self.command, env, self.log, label, ["--spare"])
        except OSError as exc:
            self.log.emit(label, f"Cannot start a spare worker: {exc}", logging.WARNING)
            return False
        self.launched += 1
        spare = _Spare(process)
        process.on_exit = lambda _: self._drop(spare)
        process.note(f"Spare started, pid {process.pid}")
        self._spares.append(spare)
        spare.waiter = asyncio.ensure_future(self._await_ready(spare))
        self._notify()
        return True

    async def _await_ready(self, spare: _Spare) -> None:
        """Read the spare's first frame: `R {"message": "spare"}` once it has warmed up."""
        try:
            frame = await spare.process.read_frame()
        except Disconnected:
            self._drop(spare)
            return
        if frame.kind is not Kind.RESULT or frame.header.get("message") != "spare":
            spare.process.note(f"Unexpected first frame {frame.header!r}: stopping it")
            self._drop(spare)
            return
        spare.modules = frozenset(str(name) for name in frame.header.get("modules") or ())
        spare.ready = True
        torch = "torch imported" if "torch" in spare.modules else "no torch to import"
        spare.process.note(f"Spare ready, pid {spare.process.pid} ({torch})")
        self._notify()

    def _drop(self, spare: _Spare) -> None:
        """Forget a spare that exited or misbehaved; stop and reap it in the background."""
        if spare not in self._spares:
            return
        self._spares.remove(spare)
        cleanup = asyncio.ensure_future(spare.process.stop(self._stop_grace))
        self._cleanups.add(cleanup)
        cleanup.add_done_callback(self._cleanups.discard)
        self._notify()

    # ---- stop ----------------------------------------------------------------

    async def stop(self) -> None:
        """Stop every spare and launch no more; no spare process is left running."""
        self._closed = True
        if self._filling is not None:
            await asyncio.gather(self._filling, return_exceptions=True)  # a launch is quick
        spares, self._spares = self._spares, []
        waiters = [spare.waiter for spare in spares if spare.waiter is not None]
        for waiter in waiters:
            waiter.cancel()
        stops = [spare.process.stop(self._stop_grace) for spare in spares]
        await asyncio.gather(*stops, *waiters, *self._cleanups, return_exceptions=True)
        self._notify()

    def kill(self) -> None:
        """SIGKILL every spare at once (last resort when the event loop is gone)."""
        self._closed = True
        for spare in self._spares:
            spare.process.signal(signal.SIGKILL)

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


def _shadowed(python_path: Sequence[str], modules: frozenset[str]) -> list[str]:
    """The `modules` that some folder of `python_path` also holds (sorted)."""
    found: set[str] = set()
    for folder in python_path:
        with contextlib.suppress(OSError):
            found.update(entry.split(".")[0] for entry in os.listdir(folder))
    return sorted(found & modules)
