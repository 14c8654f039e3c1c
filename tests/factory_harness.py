"""Shared by the worker-factory pool tests: model specs of small handlers, pools, requests.

`spec_maker(tmp_path)` makes `ModelSpec`s whose handler source is written into a
folder of their own; a `Fleet` is one `WorkerFactory` and the `WorkerPool`s built
on it (no GPU unless `gpu_count` says otherwise), all stopped when its `async
with` block ends, however it ends; `ask` sends one request and decodes the JSON
answer; `run` runs a test's coroutine under a hang guard.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import psutil

from jupyter_serve.server.batching import Batcher
from jupyter_serve.server.models import ModelSpec
from jupyter_serve.server.pool import WorkerFactory, WorkerPool
from jupyter_serve.wire.protocol import InferenceRequest, Parameter

T = TypeVar("T")
HANG_GUARD = 120.0  # seconds; only stops a broken factory from hanging the suite

# Answers with the worker's pid and its parent's.
WHO = """
import os


def handle(data, context):
    if data is None:
        return None
    return [{"pid": os.getpid(), "parent": os.getppid()} for _ in data]
"""


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, HANG_GUARD))


def spec_maker(tmp_path: Path) -> Callable[..., ModelSpec]:
    def make(name: str = "who", source: str = WHO, **changes: Any) -> ModelSpec:
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        (folder / "handler.py").write_text(source)
        fields: dict[str, Any] = {
            "model_name": name, "version": "1.0", "model_dir": str(folder),
            "handler": "handler.py", "manifest": {}, "batch_size": 1, "max_batch_delay": 0.0,
            "response_timeout": 60.0, "startup_timeout": 60.0,
        }  # fmt: skip
        return ModelSpec(**{**fields, **changes})

    return make


class Fleet:
    """A factory and the pools using it; leaving `async with` stops the pools, then it."""

    def __init__(self, python: str = sys.executable, **factory_options: Any) -> None:
        self.factory = WorkerFactory(python, **factory_options)
        self.pools: list[WorkerPool] = []

    def pool(self, spec: ModelSpec, **options: Any) -> WorkerPool:
        options.setdefault("gpu_count", lambda: 0)
        pool = WorkerPool(spec, Batcher.for_spec(spec), factory=self.factory, **options)
        self.pools.append(pool)
        return pool

    async def __aenter__(self) -> Fleet:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(pool.stop() for pool in self.pools))
        await self.factory.stop()  # after the workers: it reaps those it forked


async def ask(pool: WorkerPool, rid: str = "r") -> Any:
    deadline = asyncio.get_running_loop().time() + HANG_GUARD
    request = InferenceRequest(rid, {}, (Parameter("body", "text/plain", b"?"),))
    return json.loads((await pool.batcher.submit(request, deadline)).body)


def threads_of(pid: int) -> int:
    """Threads of process `pid` as the kernel counts them (native ones included)."""
    return len(os.listdir(f"/proc/{pid}/task"))


def gone(pids: list[int]) -> bool:
    """None of `pids` runs (a zombie an orphan left for init to reap counts as gone)."""
    return not any(_running(pid) for pid in pids)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
