"""jupyter_serve.pool.factory with a real factory process and real forked workers.

Each test runs its own `WorkerFactory` (one `import torch` each) and worker pools
of small handlers written here. The factory's readiness and pending forks are
awaited through `WorkerFactory.wait_until`, never by sleeping.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

from jupyter_serve.batching import Batcher
from jupyter_serve.models import ModelSpec
from jupyter_serve.pool import WorkerFactory, WorkerPool
from jupyter_serve.pool.factory import FactoryState
from jupyter_serve.pool.process import worker_command
from jupyter_serve.protocol import InferenceRequest, Parameter

pytest.importorskip("torch")

T = TypeVar("T")
HANG_GUARD = 120.0  # seconds; only stops a broken factory from hanging the suite

WHO = """
import os
import threading


def handle(data, context):
    if data is None:
        return None
    return [{"pid": os.getpid(), "parent": os.getppid()} for _ in data]
"""


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, HANG_GUARD))


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., ModelSpec]:
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


def make_pool(spec: ModelSpec, factory: WorkerFactory, **options: Any) -> WorkerPool:
    options.setdefault("gpu_count", lambda: 0)
    return WorkerPool(spec, Batcher.for_spec(spec), factory=factory, **options)


async def ask(pool: WorkerPool, rid: str = "r") -> Any:
    deadline = asyncio.get_running_loop().time() + HANG_GUARD
    request = InferenceRequest(rid, {}, (Parameter("body", "text/plain", b"?"),))
    return json.loads((await pool.batcher.submit(request, deadline)).body)


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def gone(pids: list[int]) -> bool:
    """None of `pids` runs (a zombie an orphan left for init to reap counts as gone)."""
    return not any(_running(pid) for pid in pids)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def delays(factory: WorkerFactory) -> list[str]:
    """The restart delays the factory announced, in order."""
    pattern = re.compile(r"until it is back \(in (\S+) s\)")
    return [m.group(1) for m in map(pattern.search, factory.log.lines) if m]


# ---- forking ------------------------------------------------------------------------------


def test_workers_are_forked_from_one_factory_and_stopping_leaves_nothing(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> dict[str, Any]:
        factory = WorkerFactory()
        pool = make_pool(make_spec(), factory)
        assert factory.state is FactoryState.IDLE  # started on first need only
        assert (await pool.scale(2)).ok
        workers = pool.processes
        answer = await ask(pool)
        seen = {
            "forked": [w.forked for w in workers],
            "parents": {psutil.Process(w.pid or 0).ppid() for w in workers},
            "factory": factory.pid, "starts": factory.starts,
            "factory_threads": threads_of(factory.pid or 0), "answer": answer,
        }  # fmt: skip
        pids = [w.pid or 0 for w in workers]
        await pool.stop()
        await factory.stop()
        seen["gone"] = not any(map(psutil.pid_exists, [*pids, factory.pid or 0]))  # all reaped
        return seen

    seen = run(main())
    assert seen["forked"] == [True, True]
    assert seen["parents"] == {seen["factory"]}
    assert (seen["starts"], seen["factory_threads"]) == (1, 1)
    assert seen["answer"]["parent"] == seen["factory"]
    assert seen["gone"]


def test_sigkill_of_the_factory_mid_start_loses_no_request(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> dict[str, Any]:
        factory = WorkerFactory()
        early = make_pool(make_spec("early"), factory)
        assert (await early.scale(1)).ok  # the factory is up and forked this one
        [orphan] = early.processes
        first = factory.pid or 0
        os.kill(first, signal.SIGSTOP)  # it takes the next request and never answers
        late = make_pool(make_spec("late"), factory)
        waiting = asyncio.ensure_future(ask(late))
        await late.scale(1, wait=False)
        await factory.wait_until(lambda f: f.pending == 1)  # the fork request is out
        os.kill(first, signal.SIGKILL)
        answer = await waiting
        [fresh] = late.processes
        await factory.wait_until(lambda f: f.state is FactoryState.READY and f.pid != first)
        assert (await late.scale(2)).ok
        [forked] = [w for w in late.processes if w is not fresh]
        seen = {
            "answer": answer, "fresh": (fresh.forked, fresh.pid), "first": first,
            "forked": (forked.forked, psutil.Process(forked.pid or 0).ppid()),
            "factory": factory.pid, "orphan_answer": await ask(early),
            "orphan_pid": orphan.pid,
        }  # fmt: skip
        pids = [w.pid or 0 for w in (orphan, fresh, forked)]
        await asyncio.gather(early.stop(), late.stop())
        await factory.stop()
        seen["gone"] = gone(pids)
        return seen

    seen = run(main())
    assert seen["answer"] == {"pid": seen["fresh"][1], "parent": os.getpid()}  # a fresh worker
    assert seen["fresh"][0] is False
    assert seen["forked"] == (True, seen["factory"])  # the restarted factory forks again
    assert seen["factory"] != seen["first"]
    # The first factory's worker outlived it and kept serving; its exit was still noticed.
    assert seen["orphan_answer"]["pid"] == seen["orphan_pid"]
    assert seen["gone"]


def failing_python(folder: Path, failures: int) -> Path:
    """A `python` that fails its first `failures` factory starts (all if negative)."""
    count = folder / "factory-starts"
    script = folder / "python"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in *jupyter_serve.worker.factory*)\n'
        f'  echo x >> "{count}"\n'
        f'  if [ {failures} -lt 0 ] || [ "$(wc -l < "{count}")" -le {failures} ]; then\n'
        "    exit 3\n  fi;;\nesac\n"
        f'exec "{sys.executable}" "$@"\n'
    )
    script.chmod(0o755)
    return script


def test_workers_start_fresh_while_the_factory_cannot_start(
    make_spec: Callable[..., ModelSpec], tmp_path: Path
) -> None:
    python = str(failing_python(tmp_path, failures=-1))

    async def main() -> dict[str, Any]:
        factory = WorkerFactory(python, backoff=(0, 3600))
        pool = make_pool(make_spec(python=python), factory)
        assert (await pool.scale(1)).ok  # its first start failed: this worker started fresh
        await factory.wait_until(lambda f: f.starts == 2 and f.state is FactoryState.RESTARTING)
        assert (await pool.scale(2)).ok  # the factory waits out its backoff: fresh again
        seen = {
            "forked": [w.forked for w in pool.processes],
            "parents": {psutil.Process(w.pid or 0).ppid() for w in pool.processes},
            "delays": delays(factory), "answer": await ask(pool),
        }  # fmt: skip
        await pool.stop()
        await factory.stop()
        return seen

    seen = run(main())
    assert seen["forked"] == [False, False]
    assert seen["parents"] == {os.getpid()}
    assert seen["delays"] == ["0", "3600"]
    assert seen["answer"]["parent"] == os.getpid()


def test_the_factory_restarts_with_backoff_reset_by_each_successful_start(
    tmp_path: Path, make_spec: Callable[..., ModelSpec]
) -> None:
    python = str(failing_python(tmp_path, failures=2))

    async def main() -> tuple[list[str], list[str], int, bool]:
        factory = WorkerFactory(python, backoff=(0, 0.01, 3600))
        pool = make_pool(make_spec(python=python), factory)
        assert (await pool.scale(1)).ok  # fresh: the factory's first start failed
        await factory.wait_until(lambda f: f.state is FactoryState.READY)  # third start
        before_kill = delays(factory)
        ready = factory.pid or 0
        factory.kill()
        await factory.wait_until(lambda f: f.state is FactoryState.READY and f.pid != ready)
        assert (await pool.scale(2)).ok
        forked = pool.processes[-1].forked
        starts = factory.starts
        await pool.stop()
        await factory.stop()
        return before_kill, delays(factory), starts, forked

    before_kill, after_kill, starts, forked = run(main())
    assert before_kill == ["0", "0.01"]  # two failed starts: the backoff grows
    assert after_kill == ["0", "0.01", "0"]  # a start that said hello resets it
    assert (starts, forked) == (4, True)


def test_another_python_or_dependencies_shadowing_its_imports_start_fresh(
    make_spec: Callable[..., ModelSpec], tmp_path: Path
) -> None:
    kernel_python = tmp_path / "kernel-python"
    kernel_python.symlink_to(sys.executable)  # another interpreter path: a kernelspec's
    deps = tmp_path / "deps"
    (deps / "torch").mkdir(parents=True)  # the model's own torch: the factory has one
    (deps / "torch" / "__init__.py").write_text("")

    async def main() -> dict[str, Any]:
        factory = WorkerFactory()
        other = make_pool(make_spec("other", python=str(kernel_python)), factory)
        assert (await other.scale(1)).ok
        starts_after_other = factory.starts
        shadowing = make_pool(make_spec("shadowing", python_path=(str(deps),)), factory)
        assert (await shadowing.scale(1)).ok
        plain = make_pool(make_spec("plain"), factory)
        assert (await plain.scale(1)).ok
        seen = {
            "other": (other.processes[0].forked, starts_after_other),
            "shadowing": shadowing.processes[0].forked,
            "plain": plain.processes[0].forked,
            "said": any("python_path holds torch" in line for line in shadowing.recent_logs()),
            "other_command": other.command,
        }  # fmt: skip
        await asyncio.gather(other.stop(), shadowing.stop(), plain.stop())
        await factory.stop()
        return seen

    seen = run(main())
    assert seen["other"] == (False, 0)  # not even started for another Python
    assert seen["other_command"] == worker_command(str(kernel_python))
    assert (seen["shadowing"], seen["said"]) == (False, True)
    assert seen["plain"] is True
