"""jupyter_serve.pool.spares with real `python -m jupyter_serve.worker --spare` processes.

Spares import torch, so these tests need it. Nothing here waits by the clock:
`SparePool.wait_until` and `WorkerPool.wait_until` wake up on state changes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from worker_harness import write_model

from jupyter_serve.batching import Batcher
from jupyter_serve.models import ModelSpec
from jupyter_serve.pool import SparePool, WorkerPool
from jupyter_serve.pool.stats import torchserve_time
from jupyter_serve.protocol import InferenceRequest

pytest.importorskip("torch")

T = TypeVar("T")
HANG_GUARD = 120.0  # seconds; only stops a broken pool from hanging the suite
FAKE_WORKER = [sys.executable, str(Path(__file__).with_name("fake_worker.py"))]

# Imports a module of the model's python_path; reports what the worker looks like.
PROBE = """
import os
import sys

import spare_dep

TORCH_WAS_WARM = "torch" in sys.modules


def handle(data, context):
    if data is None:
        return None
    import torch

    facts = {
        "pid": os.getpid(),
        "dep": spare_dep.VALUE,
        "torch_was_warm": TORCH_WAS_WARM,
        "threads": torch.get_num_threads(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
    }
    return [facts for _ in data]
"""
ECHO = "import os\n\ndef handle(data, context):\n    return data and [os.getpid() for _ in data]\n"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, HANG_GUARD))


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., ModelSpec]:
    """A spec of the probe model (its deps folder on python_path), or of `echo=True`."""

    def make(name: str, *, echo: bool = False, **changes: Any) -> ModelSpec:
        deps = write_model(tmp_path / "deps", {"spare_dep.py": "VALUE = 'from deps'\n"})
        files = {"echo.py": ECHO} if echo else {"probe.py": PROBE}
        folder = write_model(tmp_path / name, files)
        fields: dict[str, Any] = {
            "model_name": name, "version": "1.0", "model_dir": str(folder),
            "handler": "echo:handle" if echo else "probe:handle", "manifest": {},
            "python_path": () if echo else (str(deps),), "torch_threads": 3,
            "response_timeout": 60.0, "startup_timeout": 60.0,
        }  # fmt: skip
        return ModelSpec(**{**fields, **changes})

    return make


def make_pool(spec: ModelSpec, spares: SparePool, **options: Any) -> WorkerPool:
    options.setdefault("backoff", (0,))
    return WorkerPool(spec, Batcher.for_spec(spec), spares=spares, gpu_count=lambda: 0, **options)


async def ask(pool: WorkerPool) -> Any:
    deadline = asyncio.get_running_loop().time() + 60.0
    result = await pool.batcher.submit(InferenceRequest("r1", {}, ()), deadline)
    return json.loads(result.body)


def one_ready(spares: SparePool) -> bool:
    return len(spares.ready_pids) == 1


def gone(pids: list[int]) -> bool:
    return not [pid for pid in pids if psutil.pid_exists(pid)]


def spare_children() -> list[int]:
    """This process's children started as spare workers (idle or adopted since)."""
    children = psutil.Process().children(recursive=True)
    return [child.pid for child in children if "--spare" in child.cmdline()]


def test_a_ready_spare_is_adopted_serves_the_model_and_is_replaced(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> dict[str, Any]:
        spares = SparePool(1)
        first = make_pool(make_spec("first", echo=True), spares)
        assert spares.pids == []  # nothing before some model starts a worker
        await first.scale(1)
        [cold] = [worker["pid"] for worker in first.workers]
        await spares.wait_until(one_ready)
        [spare] = spares.ready_pids
        assert spare != cold

        before = datetime.now(timezone.utc)
        second = make_pool(make_spec("second"), spares)
        await second.scale(1)
        [worker] = second.processes
        [described] = second.workers
        answer = await ask(second)
        await spares.wait_until(lambda s: one_ready(s) and spare not in s.ready_pids)
        [refill] = spares.ready_pids
        logs = second.recent_logs()

        await asyncio.gather(first.stop(), second.stop(), spares.stop())
        assert gone([cold, spare, refill])
        assert (worker.pid, worker.adopted, described["pid"]) == (spare, True, spare)
        assert worker.start_time < before  # the spare's launch, not this scale call
        assert described["startTime"] == torchserve_time(worker.start_time)
        assert described["memoryUsage"] > 0
        assert any(f"Worker adopted a spare, pid {spare}" in line for line in logs)
        assert any("[spare/" in line and "Spare ready" in line for line in spares.log.lines)
        return dict(answer)

    answer = run(main())
    assert answer == {
        "pid": answer["pid"], "dep": "from deps", "torch_was_warm": True, "threads": 3,
        "omp": os.environ.get("OMP_NUM_THREADS", "3"),
    }  # fmt: skip


def test_a_spare_that_died_is_dropped_and_never_adopted(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> None:
        spares = SparePool(1)
        assert spares.take(spares.command) is None  # starts filling
        await spares.wait_until(one_ready)
        [dead] = spares.ready_pids
        os.kill(dead, signal.SIGKILL)
        await spares.wait_until(lambda s: dead not in s.pids)

        pool = make_pool(make_spec("after", echo=True), spares)
        await pool.scale(1)
        [worker] = pool.processes
        assert (worker.adopted, await ask(pool)) == (False, worker.pid)
        assert spares.launched == 2  # the worker's start launched a replacement
        await asyncio.gather(pool.stop(), spares.stop())
        assert gone([dead, worker.pid, *spare_children()])

    run(main())


def test_spare_workers_0_never_starts_a_spare(make_spec: Callable[..., ModelSpec]) -> None:
    async def main() -> None:
        spares = SparePool(0)
        pool = make_pool(make_spec("cold", echo=True), spares)
        await pool.scale(2)
        assert not any(worker.adopted for worker in pool.processes)
        assert (spares.launched, spares.pids, spare_children()) == (0, [], [])
        await asyncio.gather(pool.stop(), spares.stop())

    run(main())


def test_other_pythons_neither_adopt_nor_start_a_spare(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> None:
        spares = SparePool(1)
        pool = make_pool(make_spec("fake", echo=True), spares, command=FAKE_WORKER)
        await pool.scale(1)
        assert (spares.launched, pool.processes[0].adopted) == (0, False)
        await asyncio.gather(pool.stop(), spares.stop())

    run(main())


def test_a_model_shipping_an_imported_package_starts_cold(
    make_spec: Callable[..., ModelSpec], tmp_path: Path
) -> None:
    own_torch = tmp_path / "own-deps"
    (own_torch / "torch").mkdir(parents=True)

    async def main() -> None:
        spares = SparePool(1)
        spares.take(spares.command)
        await spares.wait_until(one_ready)
        [spare] = spares.ready_pids
        spec = make_spec("shadowing", echo=True, python_path=(str(own_torch),))
        pool = make_pool(spec, spares)
        await pool.scale(1)
        assert pool.processes[0].pid != spare
        assert spares.ready_pids == [spare]  # still there for the next model
        assert any("python_path holds torch" in line for line in spares.log.lines)
        await asyncio.gather(pool.stop(), spares.stop())
        assert gone([spare])

    run(main())


def test_stop_leaves_no_spare_even_while_they_warm_up() -> None:
    async def main() -> list[int]:
        spares = SparePool(2)
        spares.take(spares.command)
        await spares.wait_until(lambda s: len(s.pids) == 2)
        pids = spares.pids
        await spares.stop()
        assert spares.take(spares.command) is None  # stopped for good: nothing new starts
        return pids

    pids = run(main())
    assert len(pids) == 2
    assert gone(pids)
    assert spare_children() == []
