"""Work whose cost grows with what a caller sends runs off the event loop: `DecodeSlots`.

The Jupyter server's one event loop also serves the user's kernels, files and
terminals, so it must only do small, bounded work per request. The KServe routes
(`routes/kserve.py`) hand everything that grows with a body or an answer (parsing
JSON, decoding and shaping tensors, encoding the answer) to `DECODES.run`: the
work runs in a thread of a pool of its own, at most `DECODE_THREADS` at once across
the server, so however many large requests arrive the loop keeps turning and at
most that many bodies are being expanded in memory at a time. The others wait their
turn on the loop, holding nothing but their body.

A thread shares the GIL with the loop: CPython hands it over between bytecodes once
the loop has waited `sys.getswitchinterval()` (5 ms) for it, so the loop keeps turning
as long as no single C call runs long; the decoders (`oip.py`,
`routes/kserve_tensors.py`) work through tensors in bounded slices for that reason.
While a large decode runs, a loop turn can still take a few of those intervals.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["DECODES", "DECODE_THREADS", "DecodeSlots"]

T = TypeVar("T")
DECODE_THREADS = 1
"""One: the loop shares the GIL with every busy decode thread, and waits the longest for
it behind more than one (measured: 2 concurrent decodes doubled the loop's worst turn).
A request waits its turn behind a large decode instead, up to about a second at the
`max_tensor_elements` cap."""


class DecodeSlots:
    """Runs functions in a pool of `limit` threads, never more than `limit` at once.

    A request waits for a slot on the loop (an `asyncio.Semaphore` per event loop), so a
    request waiting its turn is cheap and a client that leaves gives up its place.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0  # calls holding a slot now
        self._pool = ThreadPoolExecutor(limit, thread_name_prefix="serve-decode")
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]
        self._slots = weakref.WeakKeyDictionary()

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` in one of the pool's threads, once a slot is free; its result or
        its exception."""
        loop = asyncio.get_running_loop()
        slots = self._slots.get(loop)
        if slots is None:
            slots = self._slots[loop] = asyncio.Semaphore(self.limit)
        async with slots:
            self.running += 1
            try:
                return await loop.run_in_executor(self._pool, work, *args)
            finally:
                self.running -= 1


DECODES = DecodeSlots(DECODE_THREADS)
"""The server's decode slots, shared by every route that decodes off the loop."""
