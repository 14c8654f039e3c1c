"""Worker output: forwarded line by line to logging and kept in a per-model buffer, bounded.

Every line a worker prints (stdout or stderr), and every lifecycle event the
pool notes (started, exited, restarting), goes to the `jupyter_serve.worker`
logger with the prefix ``[model/worker_id]`` and into `WorkerLog.lines`, the
newest lines that `%serve logs` and ``GET serve/logs`` show.

Nothing a handler prints can make these large or slow to show:

* the server log shows a line with its control characters escaped (`logsafe.printable`:
  no ESC sequence a handler echoes reaches the terminal); the buffer keeps it as printed;
* a line is kept and logged as its first `MAX_LINE_CHARS` characters followed by
  `CUT_MARK` (`clip`); the pipe reader keeps only a line's first `MAX_LINE_READ`
  bytes and skips the rest as it arrives (`read_line`), buffering at most
  `READ_LIMIT` bytes per stream;
* the buffer keeps at most `DEFAULT_LINES` lines and `MAX_LOG_BYTES` bytes (UTF-8),
  dropping the oldest first;
* an answer shows the newest lines whose JSON fits in `MAX_ANSWER_BYTES`
  (`newest_fitting`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

from jupyter_serve.wire.logsafe import printable

__all__ = [
    "CUT_MARK",
    "LOGGER",
    "MAX_ANSWER_BYTES",
    "MAX_LINE_CHARS",
    "MAX_LOG_BYTES",
    "READ_LIMIT",
    "WorkerLog",
    "clip",
    "newest_fitting",
    "pump_lines",
    "read_line",
]

LOGGER = logging.getLogger("jupyter_serve.worker")
DEFAULT_LINES = 1000
MAX_LINE_CHARS = 8192  # characters of a line that are kept
CUT_MARK = f" [... line cut at {MAX_LINE_CHARS} characters]"
MAX_LINE_READ = 4 * MAX_LINE_CHARS  # bytes read of a line: MAX_LINE_CHARS characters of any UTF-8
READ_LIMIT = 2 * MAX_LINE_READ  # the StreamReader limit of a worker's stdout and stderr
MAX_LOG_BYTES = 1 << 20  # a model's buffer, UTF-8 bytes of its lines
MAX_ANSWER_BYTES = 2 << 20  # the JSON of the lines one answer shows
_JSON_ITEM = 8  # what an indented list adds to each line's JSON: indent, comma, newline


def clip(text: str, cut: bool = False) -> str:
    """`text` as it is kept: its first `MAX_LINE_CHARS` characters and `CUT_MARK` when it
    is longer than those and the mark, or when `cut` (its reader skipped the rest).

    A clipped text is clipped already: `clip(clip(t, c)) == clip(t, c)`.
    """
    if cut or len(text) > MAX_LINE_CHARS + len(CUT_MARK):
        return text[:MAX_LINE_CHARS] + CUT_MARK
    return text


def newest_fitting(lines: Sequence[str], budget: int = MAX_ANSWER_BYTES) -> list[str]:
    """The newest of `lines`, oldest first, whose JSON (indented, ASCII) fits in `budget` bytes."""
    kept: list[str] = []
    for line in reversed(lines):
        budget -= len(json.dumps(line)) + _JSON_ITEM
        if budget < 0:
            break
        kept.append(line)
    kept.reverse()
    return kept


def _size(line: str) -> int:
    return len(line.encode("utf-8", "surrogatepass"))


class WorkerLog:
    """One model's sink for its workers' output.

    `lines` is the buffer: at most its `maxlen` lines (1000 unless a buffer is given)
    and `max_bytes` bytes; only `emit` adds to it.
    """

    def __init__(
        self, model_name: str, lines: deque[str] | None = None, max_bytes: int = MAX_LOG_BYTES
    ) -> None:
        self.model_name = model_name
        self.lines: deque[str] = deque(maxlen=DEFAULT_LINES) if lines is None else lines
        self.max_bytes = max_bytes
        self.size = sum(map(_size, self.lines))  # bytes the buffer holds
        self._listeners: list[Callable[[str], None]] = []

    def emit(self, worker_id: str, text: str, level: int = logging.INFO) -> None:
        """Log one line of `worker_id` (clipped) and keep it, time-stamped (UTC), in the buffer."""
        prefix = f"[{self.model_name}/{worker_id}]"
        text = clip(text)
        LOGGER.log(level, "%s %s", prefix, printable(text))  # no ESC sequence reaches a terminal
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        line = f"{stamp}Z {prefix} {text}"
        self._keep(line)
        for listener in list(self._listeners):
            listener(line)

    def _keep(self, line: str) -> None:
        lines = self.lines
        if lines.maxlen == 0:
            return
        if len(lines) == lines.maxlen:  # the append drops the oldest line
            self.size -= _size(lines[0])
        lines.append(line)
        self.size += _size(line)
        while self.size > self.max_bytes and lines:
            self.size -= _size(lines.popleft())

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call `listener` with every new buffer line; returns the unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def recent(self, limit: int | None = None) -> list[str]:
        """The newest `limit` lines (all kept lines when None), oldest first."""
        lines = list(self.lines)
        return lines if limit is None else lines[-limit:] if limit > 0 else []


async def read_line(stream: asyncio.StreamReader) -> tuple[bytes, bool] | None:
    """The next line of `stream` without its line end, at most `MAX_LINE_READ` bytes of it,
    and whether more of it was skipped; None at EOF.

    A line over the reader's limit is taken in pieces as they arrive, never held whole.
    """
    head, skipped = b"", False
    while True:
        try:
            part, ended = await stream.readuntil(b"\n"), True
        except asyncio.IncompleteReadError as exc:  # EOF: a last line without its newline
            part, ended = exc.partial, True
            if not (part or head or skipped):
                return None
        except asyncio.LimitOverrunError as exc:  # no newline within the limit: take a piece
            part, ended = await stream.readexactly(exc.consumed), False
        room = MAX_LINE_READ - len(head)
        skipped = skipped or len(part.rstrip(b"\r\n") if ended else part) > room
        head += part[:room]
        if ended:
            return head.rstrip(b"\r\n"), skipped


async def pump_lines(
    stream: asyncio.StreamReader, emit: Callable[[str], None], tail: deque[str] | None = None
) -> None:
    """Forward `stream` to `emit` line by line (clipped) until EOF; keep the last lines in
    `tail` too."""
    while (line := await read_line(stream)) is not None:
        raw, skipped = line
        text = clip(raw.decode("utf-8", errors="replace"), skipped)
        if tail is not None:
            tail.append(text)
        emit(text)
