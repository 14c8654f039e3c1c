"""`FollowedLines`: a child process's text output, read line by line in a thread.

A test waits on a line (`wait_for`) instead of polling; the reader marks the end of
the stream, so a wait also ends when the process exits first. Used by
tests/serve_process.py (`jupyter serve`'s stderr) and tests/torchserve_process.py
(TorchServe's console).
"""

from __future__ import annotations

import threading
from typing import IO

CLOSED = "<stream closed>"


class FollowedLines:
    """The lines of `stream` so far, appended by a daemon thread until it closes."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.stream:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self.lines.append(CLOSED)
            self._changed.notify_all()

    def text(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def wait_for(self, text: str, count: int, timeout: float) -> int:
        """Block until `count` lines contain `text`, the stream closes or `timeout` passes;
        returns how many lines contain it."""

        def seen() -> bool:
            return self._count(text) >= count or self.lines[-1:] == [CLOSED]

        with self._changed:
            self._changed.wait_for(seen, timeout=timeout)
            return self._count(text)

    def close(self, timeout: float) -> None:
        """Wait for the reader to see the end of the stream, then close it."""
        self._reader.join(timeout=timeout)
        self.stream.close()

    def _count(self, text: str) -> int:
        return sum(text in line for line in self.lines)
