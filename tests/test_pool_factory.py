"""jupyter_serve.server.pool.factory with a real factory process and real forked workers.

Each test runs its own `WorkerFactory` (one `import torch` each) and worker pools
of small handlers written here. The factory's readiness and pending forks are
awaited through `WorkerFactory.wait_until`, never by sleeping.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from factory_harness import Fleet, ask, gone, run, spec_maker, threads_of
from lm_models import tiny_lm

from jupyter_serve.server.models import ModelSpec
from jupyter_serve.server.pool import WorkerFactory
from jupyter_serve.server.pool.factory import FactoryState
from jupyter_serve.server.pool.process import worker_command

pytest.importorskip("torch")

__all__ = ["tiny_lm"]


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., ModelSpec]:
    return spec_maker(tmp_path)


def delays(factory: WorkerFactory) -> list[str]:
    """The restart delays the factory announced, in order."""
    pattern = re.compile(r"until it is back \(in (\S+) s\)")
    return [m.group(1) for m in map(pattern.search, factory.log.lines) if m]


# ---- forking ------------------------------------------------------------------------------


def test_workers_are_forked_from_one_factory_and_stopping_leaves_nothing(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> dict[str, Any]:
        async with Fleet() as fleet:
            factory, pool = fleet.factory, fleet.pool(make_spec())
            assert factory.state is FactoryState.IDLE  # started on first need only
            assert (await pool.scale(2)).ok
            workers = pool.processes
            return {
                "forked": [w.forked for w in workers],
                "parents": {psutil.Process(w.pid or 0).ppid() for w in workers},
                "factory": factory.pid, "starts": factory.starts,
                "factory_threads": threads_of(factory.pid or 0), "answer": await ask(pool),
                "pids": [w.pid or 0 for w in workers],
            }  # fmt: skip

    seen = run(main())
    assert seen["forked"] == [True, True]
    assert seen["parents"] == {seen["factory"]}
    assert (seen["starts"], seen["factory_threads"]) == (1, 1)
    assert seen["answer"]["parent"] == seen["factory"]
    assert not any(map(psutil.pid_exists, [*seen["pids"], seen["factory"]]))  # all reaped


def test_sigkill_of_the_factory_mid_start_loses_no_request(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> dict[str, Any]:
        async with Fleet() as fleet:
            factory, early = fleet.factory, fleet.pool(make_spec("early"))
            assert (await early.scale(1)).ok  # the factory is up and forked this one
            [orphan] = early.processes
            first = factory.pid or 0
            os.kill(first, signal.SIGSTOP)  # it takes the next request and never answers
            late = fleet.pool(make_spec("late"))
            waiting = asyncio.ensure_future(ask(late))
            await late.scale(1, wait=False)
            await factory.wait_until(lambda f: f.pending == 1)  # the fork request is out
            os.kill(first, signal.SIGKILL)
            answer = await waiting
            [fresh] = late.processes
            await factory.wait_until(lambda f: f.state is FactoryState.READY and f.pid != first)
            assert (await late.scale(2)).ok
            [forked] = [w for w in late.processes if w is not fresh]
            return {
                "answer": answer, "fresh": (fresh.forked, fresh.pid), "first": first,
                "forked": (forked.forked, psutil.Process(forked.pid or 0).ppid()),
                "factory": factory.pid, "orphan_answer": await ask(early),
                "orphan_pid": orphan.pid, "pids": [w.pid or 0 for w in (orphan, fresh, forked)],
            }  # fmt: skip

    seen = run(main())
    assert seen["answer"] == {"pid": seen["fresh"][1], "parent": os.getpid()}  # a fresh worker
    assert seen["fresh"][0] is False
    assert seen["forked"] == (True, seen["factory"])  # the restarted factory forks again
    assert seen["factory"] != seen["first"]
    # The first factory's worker outlived it and kept serving; its exit was still noticed.
    assert seen["orphan_answer"]["pid"] == seen["orphan_pid"]
    assert gone(seen["pids"])


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
        async with Fleet(python, backoff=(0, 3600)) as fleet:
            factory, pool = fleet.factory, fleet.pool(make_spec(python=python))
            assert (await pool.scale(1)).ok  # its first start failed: this one started fresh
            await factory.wait_until(lambda f: f.starts == 2 and f.state is FactoryState.RESTARTING)
            assert (await pool.scale(2)).ok  # the factory waits out its backoff: fresh again
            return {
                "forked": [w.forked for w in pool.processes],
                "parents": {psutil.Process(w.pid or 0).ppid() for w in pool.processes},
                "delays": delays(factory), "answer": await ask(pool),
            }  # fmt: skip

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
        async with Fleet(python, backoff=(0, 0.01, 3600)) as fleet:
            factory, pool = fleet.factory, fleet.pool(make_spec(python=python))
            assert (await pool.scale(1)).ok  # fresh: the factory's first start failed
            await factory.wait_until(lambda f: f.state is FactoryState.READY)  # third start
            before_kill = delays(factory)
            ready = factory.pid or 0
            factory.kill()
            await factory.wait_until(lambda f: f.state is FactoryState.READY and f.pid != ready)
            assert (await pool.scale(2)).ok
            return before_kill, delays(factory), factory.starts, pool.processes[-1].forked

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
        async with Fleet() as fleet:
            factory = fleet.factory
            other = fleet.pool(make_spec("other", python=str(kernel_python)))
            assert (await other.scale(1)).ok
            starts_after_other = factory.starts
            shadowing = fleet.pool(make_spec("shadowing", python_path=(str(deps),)))
            assert (await shadowing.scale(1)).ok
            plain = fleet.pool(make_spec("plain"))
            assert (await plain.scale(1)).ok
            logs = shadowing.recent_logs()
            return {
                "other": (other.processes[0].forked, starts_after_other),
                "shadowing": shadowing.processes[0].forked,
                "plain": plain.processes[0].forked,
                "said": any("python_path holds torch" in line for line in logs),
                "other_command": other.command,
            }

    seen = run(main())
    assert seen["other"] == (False, 0)  # not even started for another Python
    assert seen["other_command"] == worker_command(str(kernel_python))
    assert (seen["shadowing"], seen["said"]) == (False, True)
    assert seen["plain"] is True


def test_language_model_workers_share_transformers_imported_once_by_the_factory(
    make_spec: Callable[..., ModelSpec], tiny_lm: Path, tmp_path: Path
) -> None:
    pytest.importorskip("transformers")
    own_deps = tmp_path / "own-deps"
    own_deps.mkdir()  # a model with dependencies of its own: they might hold transformers
    deps = tmp_path / "deps"
    (deps / "transformers").mkdir(parents=True)  # its own transformers: the factory's is held
    (deps / "transformers" / "__init__.py").write_text("")

    def lm_spec(name: str, *python_path: Path) -> ModelSpec:
        folder = str(tiny_lm)
        return make_spec(name, handler="causal_lm", model_dir=folder, python_path=python_path)

    async def main() -> dict[str, Any]:
        async with Fleet() as fleet:
            factory = fleet.factory
            lm_with_deps = fleet.pool(lm_spec("lm-deps", own_deps))
            assert (await lm_with_deps.scale(1)).ok
            held_before = factory.modules
            lm = fleet.pool(lm_spec("lm"))
            assert (await lm.scale(2)).ok
            held_after = factory.modules
            shadowing = fleet.pool(make_spec("shadowing", python_path=(str(deps),)))
            assert (await shadowing.scale(1)).ok
            pools = (lm_with_deps, lm, shadowing)
            logs = shadowing.recent_logs()
            return {
                "held": ("transformers" in held_before, "transformers" in held_after),
                "forked": [worker.forked for pool in pools for worker in pool.processes],
                "said": any(
                    "python_path holds" in line and "transformers" in line for line in logs
                ),
                "factory_threads": threads_of(factory.pid or 0),
            }

    seen = run(main())
    assert seen["held"] == (False, True)  # imported for the model without dependencies only
    assert seen["forked"] == [True, True, True, False]
    assert (seen["said"], seen["factory_threads"]) == (True, 1)


def test_the_first_fork_of_a_language_model_may_import_for_longer_than_the_fork_timeout(
    make_spec: Callable[..., ModelSpec], tiny_lm: Path
) -> None:
    pytest.importorskip("transformers")  # importing it takes seconds, not a fifth of one

    async def main() -> tuple[bool, int]:
        async with Fleet(fork_timeout=0.2) as fleet:
            lm = fleet.pool(make_spec("lm", handler="causal_lm", model_dir=str(tiny_lm)))
            assert (await lm.scale(1)).ok
            return lm.processes[0].forked, fleet.factory.starts

    assert run(main()) == (True, 1)  # neither killed as hung nor started fresh
