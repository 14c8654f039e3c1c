"""The server-side worker pool: worker processes of one model version, fed by its Batcher.

* `process.WorkerProcess`: one `python -m jupyter_serve.worker` process, its socket and output.
* `channel.Channel`: that socket: send a frame, await the answer (streamed chunks on the way).
* `worker.SubprocessWorker`: one worker of a model: the load and the batches over that process.
* `pool.WorkerPool`: keeps N of them alive (backoff restarts, GPU round-robin) and
  runs one dispatch loop per ready worker.
* `delivery`: the worker's answers (results, streamed chunks, errors) to the waiting requests.
* `factory.WorkerFactory`: one per server, the worker factory (a warm interpreter with
  torch imported) that forks new workers of any model instead of starting them cold;
  `forked.ForkedChild` is one such worker's pid, output and exit.
* `errors`: `WorkerLoadError`, `WorkerDied`, `BatchFailed`.
* `environment`: what a worker process starts with: its command, its working directory
  (never the Jupyter root) and the server's environment without its credentials.
* `logs.WorkerLog`: worker output (lines cut at 8192 characters) to logging and a buffer
  bounded in lines and bytes, for `%serve logs`.
* `stats`: resident memory of a worker and TorchServe's date format, for describe.

Runs in the Jupyter server process: asyncio only, never torch or tornado.
"""

from __future__ import annotations

from jupyter_serve.server.pool.errors import BatchFailed, WorkerDied, WorkerLoadError
from jupyter_serve.server.pool.factory import WorkerFactory
from jupyter_serve.server.pool.logs import WorkerLog
from jupyter_serve.server.pool.pool import BACKOFF, MetricsCallback, ScaleResult, WorkerPool
from jupyter_serve.server.pool.worker import SubprocessWorker, WorkerReply, WorkerState

__all__ = [
    "BACKOFF",
    "BatchFailed",
    "MetricsCallback",
    "ScaleResult",
    "SubprocessWorker",
    "WorkerDied",
    "WorkerFactory",
    "WorkerLoadError",
    "WorkerLog",
    "WorkerPool",
    "WorkerReply",
    "WorkerState",
]
