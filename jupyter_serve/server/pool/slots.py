"""What a `WorkerPool` is made of: its slots, its scale results, its restart backoff.

`Slot` is one worker position of a pool (supervisor task, current worker, GPU);
`ScaleResult` is what one `scale` call did; `BACKOFF` is TorchServe's Fibonacci
restart delays, shared with the worker factory. The pool's behaviour lives in
pool.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jupyter_serve.server.pool.errors import WorkerLoadError
from jupyter_serve.server.pool.worker import SubprocessWorker

if TYPE_CHECKING:
    from jupyter_serve.server.models import ModelSpec
    from jupyter_serve.server.pool.continuous import ContinuousBatch

__all__ = ["BACKOFF", "LoadCallback", "MetricsCallback", "ScaleResult", "Slot"]

BACKOFF = (0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597)
MetricsCallback = Callable[["ModelSpec", list[dict[str, Any]], float, int, float], None]
"""on_metrics(spec, metrics, predict_ms, batch_len, queue_ms): queue_ms is the batch's mean."""
LoadCallback = Callable[["ModelSpec", str, float, list[dict[str, Any]]], None]
"""on_load(spec, worker_name, load_ms, metrics): a worker loaded; `metrics` its initialize's."""


@dataclass(frozen=True)
class ScaleResult:
    """What a `scale` call did: workers started and stopped, and the loads that failed.

    With `waited` False the call returned at once: `started` and `stopped` then
    count the workers scheduled to start and to stop.
    """

    target: int
    started: int = 0
    stopped: int = 0
    failures: tuple[WorkerLoadError, ...] = ()
    waited: bool = True

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def messages(self) -> list[str]:
        return [error.message for error in self.failures]


@dataclass(eq=False)
class Slot:
    """One worker position of a pool: its supervisor task, its current worker, its GPU,
    and, with continuous batching, the batch that worker runs (dispatch.py)."""

    gpu_id: int | None
    first_load: asyncio.Future[WorkerLoadError | None]
    attention: asyncio.Event = field(default_factory=asyncio.Event)
    retiring: bool = False
    worker: SubprocessWorker | None = None
    task: asyncio.Task[None] | None = None
    failing_since: float | None = None  # time.monotonic() of the first failure since a load
    batch: ContinuousBatch | None = None
