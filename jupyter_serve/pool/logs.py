"""Worker output: forwarded line by line to logging and kept in a per-model ring buffer.

Every line a worker prints (stdout or stderr), and every lifecycle event the
pool notes (started, exited, restarting), goes to the `jupyter_serve.worker`
logger with the prefix ``[model/worker_id]`` and into `WorkerLog.lines`, a
`collections.deque` of the last lines (1000 by default) that `%serve logs` shows.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from datetime import datetime, timezone

__all__ = ["LOGGER", "WorkerLog", "pump_lines"]

LOGGER = logging.getLogger("jupyter_serve.worker")
DEFAULT_LINES = 1000
_TOO_LONG = "<line longer than the stream limit, dropped>"


class WorkerLog:
    """One model's sink for its workers' output."""

    def __init__(self, model_name: str, lines: deque[str] | None = None) -> None:
        self.model_name = model_name
        self.lines: deque[str] = deque(maxlen=DEFAULT_LINES) if lines is None else lines
        self._listeners: list[Callable[[str], None]] = []

    def emit(self, worker_id: str, text: str, level: int = logging.INFO) -> None:
        """Log one line of `worker_id` and keep it, time-stamped (UTC), in the buffer."""
        prefix = f"[{self.model_name}/{worker_id}]"
        LOGGER.log(level, "%s %s", prefix, text)
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        line = f"{stamp}Z {prefix} {text}"
        self.lines.append(line)
        for listener in list(self._listeners):
            listener(line)

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call `listener` with every new buffer line; returns the unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def recent(self, limit: int | None = None) -> list[str]:
        """The newest `limit` lines (all kept lines when None), oldest first."""
        lines = list(self.lines)
        return lines if limit is None else lines[-limit:] if limit > 0 else []


async def pump_lines(
    stream: asyncio.StreamReader, emit: Callable[[str], None], tail: deque[str]
) -> None:
    """Forward `stream` to `emit` line by line until EOF; keep the last lines in `tail` too."""
    while True:
        try:
            raw = await stream.readline()
        except ValueError:  # a line over the reader's limit: asyncio drops it and goes on
            raw = _TOO_LONG.encode()
        if not raw:
            return
        text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        tail.append(text)
        emit(text)
