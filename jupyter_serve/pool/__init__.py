"""The server-side worker pool: worker processes of one model version, fed by its Batcher.

* `worker.SubprocessWorker`: one `python -m jupyter_serve.worker` process and its socket.
* `channel.Channel`: that socket: send a frame, await the answer (streamed chunks on the way).
* `pool.WorkerPool`: keeps N of them alive (backoff restarts, GPU round-robin) and
  runs one dispatch loop per ready worker.
* `delivery`: the worker's answers (results, streamed chunks, errors) to the waiting requests.
* `errors`: `WorkerLoadError`, `WorkerDied`, `BatchFailed`.
* `logs.WorkerLog`: worker output to logging and a ring buffer for `%serve logs`.
* `stats`: resident memory of a worker and TorchServe's date format, for describe.

Runs in the Jupyter server process: asyncio only, never torch or tornado.
"""

from __future__ import annotations

from .errors import BatchFailed, WorkerDied, WorkerLoadError
from .logs import WorkerLog
from .pool import BACKOFF, MetricsCallback, ScaleResult, WorkerPool
from .worker import SubprocessWorker, WorkerReply, WorkerState

__all__ = [
    "BACKOFF",
    "BatchFailed",
    "MetricsCallback",
    "ScaleResult",
    "SubprocessWorker",
    "WorkerDied",
    "WorkerLoadError",
    "WorkerLog",
    "WorkerPool",
    "WorkerReply",
    "WorkerState",
]
