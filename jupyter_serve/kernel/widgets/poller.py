"""`Poller`: fetch something periodically on the kernel's asyncio loop, without blocking cells.

The fetch (blocking HTTP through `client.ServeClient`) runs in a thread via
`asyncio.to_thread`; its result or exception is handed to `on_result`/`on_error`
on the loop's own thread, where widget updates belong. `poke()` fetches at once
(after an action), `stop()` ends the task (the dashboard calls it when closed).
An error never ends polling: the next round may succeed, and `on_result` then
shows the recovered state. Nothing here knows about widgets or HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Poller"]

T = TypeVar("T")
log = logging.getLogger(__name__)


class Poller(Generic[T]):
    """Call `fetch` in a thread every `interval` seconds; report on the loop's thread."""

    def __init__(
        self,
        fetch: Callable[[], T],
        on_result: Callable[[T], None],
        on_error: Callable[[Exception], None],
        *,
        interval: float = 2.0,
    ) -> None:
        self.fetch = fetch
        self.on_result = on_result
        self.on_error = on_error
        self.interval = interval
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Task[None]:
        """Start polling on `loop` (default: the kernel's, i.e. the current, event loop)."""
        if self._task is not None and not self._task.done():
            return self._task
        self._loop = loop or _current_loop()
        self._wake = asyncio.Event()
        self._task = self._loop.create_task(self._run())
        return self._task

    def stop(self) -> None:
        """End polling; a fetch in flight finishes in its thread and is ignored."""
        if self._task is None or self._loop is None or self._task.done():
            return
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task.cancel)

    def poke(self) -> None:
        """Fetch now instead of at the end of the current interval."""
        if self._loop is not None and self._wake is not None and self.running:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def _run(self) -> None:
        while True:
            try:
                result = await asyncio.to_thread(self.fetch)
            except Exception as exc:  # unreachable server, HTTP error, bad answer
                _report(self.on_error, exc)
            else:
                _report(self.on_result, result)
            await self._pause()

    async def _pause(self) -> None:
        assert self._wake is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), self.interval)
        self._wake.clear()


def _report(callback: Callable[[T], None], value: T) -> None:
    """Run a callback; its failure is logged, never the end of polling."""
    try:
        callback(value)
    except Exception:
        log.exception("The poller's callback %r failed", callback)


def _current_loop() -> asyncio.AbstractEventLoop:
    """The running loop (a cell in ipykernel runs inside it), else the thread's current loop."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.get_event_loop_policy().get_event_loop()
