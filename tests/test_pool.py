"""Tests for server/pool/ with real worker processes (the quick tests/fake_worker.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jupyter_serve.server.batching import Batcher
from jupyter_serve.server.models import BatchPolicy, DeviceType, ModelSpec
from jupyter_serve.server.pool import (
    BatchFailed,
    ScaleResult,
    SubprocessWorker,
    WorkerDied,
    WorkerLoadError,
    WorkerPool,
    WorkerState,
    cores,
)
from jupyter_serve.wire.errors import BadRequest, ServeError, ServiceUnavailable
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult, Parameter

T = TypeVar("T")
FAKE_WORKER = [sys.executable, str(Path(__file__).with_name("fake_worker.py"))]
HANG_GUARD = 30.0  # seconds; only stops a broken pool from hanging the suite


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, HANG_GUARD))


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., ModelSpec]:
    def make(**changes: Any) -> ModelSpec:
        fields: dict[str, Any] = {
            "model_name": "echo",
            "version": "1.0",
            "model_dir": str(tmp_path),
            "handler": "handler.py",
            "manifest": {},
            "batch_size": 4,
            "max_batch_delay": 0.0,
            "response_timeout": 20.0,
            "startup_timeout": 20.0,
        }
        fake = changes.pop("fake", None)
        if fake is not None:
            fields["model_yaml_config"] = {"fake": fake}
        return ModelSpec(**{**fields, **changes})

    return make


def make_pool(spec: ModelSpec, **options: Any) -> WorkerPool:
    options.setdefault("backoff", (0,))
    options.setdefault("gpu_count", lambda: 0)
    return WorkerPool(spec, Batcher.for_spec(spec), command=FAKE_WORKER, **options)


def request(rid: str, body: bytes = b"", **headers: str) -> InferenceRequest:
    params = (Parameter("body", "application/octet-stream", body),) if body else ()
    return InferenceRequest(request_id=rid, headers=headers, parameters=params)


def submit(pool: WorkerPool, rid: str, body: bytes = b"", **headers: str) -> Any:
    deadline = asyncio.get_running_loop().time() + 60.0
    return pool.batcher.submit(request(rid, body, **headers), deadline)


async def ask(pool: WorkerPool, rid: str, body: bytes = b"", **headers: str) -> InferenceResult:
    result: InferenceResult = await submit(pool, rid, body, **headers)
    return result


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def pids(pool: WorkerPool) -> list[int]:
    return [w["pid"] for w in pool.workers]


def healthy_with_new_pid(old: int) -> Callable[[WorkerPool], bool]:
    return lambda pool: pool.healthy_count == 1 and old not in pids(pool)


# ---- scaling, serving, stopping ---------------------------------------------------------


def test_scale_up_serves_describes_and_stop_leaves_no_process(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> tuple[ScaleResult, list[dict[str, Any]], InferenceResult, list[int]]:
        pool = make_pool(make_spec())
        scaled = await pool.scale(2)
        described = pool.workers
        result = await ask(pool, "r1", b"hello")
        await pool.stop()
        return scaled, described, result, [w["pid"] for w in described]

    scaled, described, result, worker_pids = run(main())
    assert (scaled.ok, scaled.started, scaled.target) == (True, 2, 2)
    assert [w["status"] for w in described] == ["READY", "READY"]
    assert all(int(w["id"]) >= 9000 for w in described)
    assert len({w["id"] for w in described}) == 2
    assert all(w["memoryUsage"] > 0 and w["gpu"] is False for w in described)
    assert all(w["gpuUsage"] == "N/A" for w in described)
    assert all(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", w["startTime"]) for w in described
    )
    assert result.body == b"hello"
    assert result.headers["x-command"] == "predict"
    assert all(pid_gone(pid) for pid in worker_pids)


def test_scale_up_and_down_at_runtime(make_spec: Callable[..., ModelSpec]) -> None:
    async def main() -> None:
        pool = make_pool(make_spec())
        await pool.scale(1)
        first = pids(pool)
        up = await pool.scale(3, 4)
        assert (up.started, pool.healthy_count, pool.max_workers) == (2, 3, 4)
        all_three = pids(pool)
        assert len(set(all_three)) == 3
        assert all_three[0] == first[0]
        down = await pool.scale(1)
        assert (down.stopped, pool.healthy_count, pool.worker_count) == (2, 1, 1)
        assert all(pid_gone(pid) for pid in all_three[1:])
        assert pids(pool) == first
        assert (await ask(pool, "after", b"x")).body == b"x"
        await pool.stop()

    run(main())


def test_scale_rejects_bad_counts_and_unknown_gpus_before_starting_anything(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> None:
        pool = make_pool(make_spec())
        with pytest.raises(BadRequest, match="max_worker cannot be less than min_worker"):
            await pool.scale(2, 1)
        with pytest.raises(BadRequest, match="min_worker must be >= 0"):
            await pool.scale(-1)
        spec = make_spec(device_type=DeviceType.GPU, device_ids=(0, 5))
        gpu_pool = make_pool(spec, gpu_count=lambda: 2)
        with pytest.raises(BadRequest, match="not visible"):
            await gpu_pool.scale(2)
        assert (pool.worker_count, gpu_pool.worker_count, gpu_pool.processes) == (0, 0, [])

    run(main())


def test_scale_without_wait_returns_before_workers_load(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> tuple[ScaleResult, int]:
        pool = make_pool(make_spec())
        scaled = await pool.scale(2, wait=False)
        healthy_at_return = pool.healthy_count
        await pool.wait_until(lambda p: p.healthy_count == 2)
        await pool.stop()
        return scaled, healthy_at_return

    scaled, healthy_at_return = run(main())
    assert (scaled.waited, scaled.started, healthy_at_return) == (False, 2, 0)


def test_stop_kills_a_worker_that_ignores_sigterm_and_fails_its_batch(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> tuple[BaseException | None, int]:
        pool = make_pool(make_spec(fake={"ignore_sigterm": True}), stop_grace=0.2)
        await pool.scale(1)
        pid = pids(pool)[0]
        busy = submit(pool, "slow", **{"x-sleep": "60", "x-print": "busy"})
        await wait_for_log(pool, "busy")
        await pool.stop()
        return busy.exception(), pid

    error, pid = run(main())
    assert isinstance(error, ServiceUnavailable)
    assert pid_gone(pid)


def test_scale_down_lets_a_busy_worker_finish_its_batch(
    make_spec: Callable[..., ModelSpec], tmp_path: Path
) -> None:
    fifo = tmp_path / "release"
    os.mkfifo(fifo)

    async def main() -> tuple[InferenceResult, ScaleResult, list[int]]:
        pool = make_pool(make_spec())
        await pool.scale(1)
        worker_pids = pids(pool)
        busy = submit(pool, "busy", b"done", **{"x-print": "busy", "x-fifo": str(fifo)})
        await wait_for_log(pool, "busy")
        scaled = await pool.scale(0, wait=False)
        assert (pool.healthy_count, len(pool.processes)) == (0, 1)  # retiring, still working
        os.close(os.open(fifo, os.O_WRONLY))  # let the worker finish its batch
        result: InferenceResult = await busy
        await pool.wait_until(lambda p: not p.processes)
        await pool.stop()
        return result, scaled, worker_pids

    result, scaled, worker_pids = run(main())
    assert result.body == b"done"
    assert scaled.stopped == 1
    assert all(pid_gone(pid) for pid in worker_pids)


def test_scale_down_does_not_wait_for_a_slow_load(make_spec: Callable[..., ModelSpec]) -> None:
    async def main() -> tuple[ScaleResult, ScaleResult]:
        pool = make_pool(make_spec(fake={"load_sleep": 60}))
        first = asyncio.ensure_future(pool.scale(1))
        await wait_for_log(pool, "fake worker stderr")  # the worker is up, loading for 60 s
        down = await pool.scale(0)
        up = await first
        await pool.stop()
        return up, down

    up, down = run(main())
    assert down.stopped == 1
    assert [e.message for e in up.failures] == ["Worker stopped before it loaded."]


# ---- batching through real workers ------------------------------------------------------


def test_concurrent_requests_arrive_as_one_batch_eager(make_spec: Callable[..., ModelSpec]) -> None:
    async def main() -> list[InferenceResult]:
        pool = make_pool(make_spec(batch_size=4))
        await pool.scale(1)
        futures = [submit(pool, f"r{i}") for i in range(4)]
        results: list[InferenceResult] = await asyncio.gather(*futures)
        await pool.stop()
        return results

    results = run(main())
    assert {r.headers["x-batch"] for r in results} == {"r0,r1,r2,r3"}
    assert [r.body for r in results] == [b"r0", b"r1", b"r2", b"r3"]


def test_strict_batch_collects_later_arrivals_and_a_full_batch_leaves_at_once(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> list[InferenceResult]:
        spec = make_spec(batch_size=3, max_batch_delay=30.0, batch_policy=BatchPolicy.STRICT)
        pool = make_pool(spec)
        await pool.scale(1)
        first = submit(pool, "a")
        loop = asyncio.get_running_loop()
        later = [loop.create_future() for _ in range(2)]
        for rid, slot in zip("bc", later, strict=True):
            loop.call_later(0.05, lambda r=rid, s=slot: s.set_result(submit(pool, r)))
        rest = [await slot for slot in later]
        # 30 s of delay would trip the guard: the batch left as soon as it was full.
        results = await asyncio.wait_for(asyncio.gather(first, *rest), 20.0)
        await pool.stop()
        return list(results)

    results = run(main())
    assert {r.headers["x-batch"] for r in results} == {"a,b,c"}
    # "a" waited in the queue for "b" and "c": its result says so, and no later one waited longer.
    by_id = {r.request_id: r for r in results}
    assert by_id["a"].queue_ms > 0
    assert by_id["a"].queue_ms >= max(by_id["b"].queue_ms, by_id["c"].queue_ms)


def test_eager_dispatches_a_lone_request_at_once(make_spec: Callable[..., ModelSpec]) -> None:
    async def main() -> InferenceResult:
        pool = make_pool(make_spec(batch_size=8, max_batch_delay=30.0))
        await pool.scale(1)
        result = await asyncio.wait_for(ask(pool, "alone"), 20.0)
        await pool.stop()
        return result

    assert run(main()).headers["x-batch"] == "alone"


def test_the_next_batch_leaves_before_the_previous_answers_are_handled(
    make_spec: Callable[..., ModelSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker and server overlap: a worker that comes free gets the queued batch at once,
    before the event loop runs the callbacks that write the previous batch's answers."""
    events: list[str] = []
    original = SubprocessWorker.predict

    def spy(worker: SubprocessWorker, batch: Any, *args: Any) -> Any:
        events.append("sent " + ",".join(r.request_id for r in batch))
        return original(worker, batch, *args)

    monkeypatch.setattr(SubprocessWorker, "predict", spy)

    async def main() -> None:
        pool = make_pool(make_spec(batch_size=1))
        await pool.scale(1)
        futures = [submit(pool, rid) for rid in ("r0", "r1", "r2")]
        for rid, future in zip(("r0", "r1", "r2"), futures, strict=True):
            future.add_done_callback(lambda _, r=rid: events.append("answered " + r))
        await asyncio.gather(*futures)
        await pool.stop()

    run(main())
    assert events == ["sent r0", "sent r1", "answered r0", "sent r2", "answered r1", "answered r2"]


def test_describe_runs_alone_and_needs_a_worker(make_spec: Callable[..., ModelSpec]) -> None:
    async def main() -> InferenceResult:
        pool = make_pool(make_spec())
        with pytest.raises(ServiceUnavailable, match="no worker to serve describe request"):
            await pool.predict_one(request("d0"))
        await pool.scale(1)
        result = await pool.predict_one(request("d1"))
        await pool.stop()
        return result

    result = run(main())
    assert (result.headers["x-command"], result.headers["x-batch"]) == ("describe", "d1")


def test_on_metrics_gets_the_workers_metrics_and_batch_facts(
    make_spec: Callable[..., ModelSpec],
) -> None:
    seen: list[tuple[Any, ...]] = []

    async def main() -> None:
        pool = make_pool(make_spec(batch_size=2), on_metrics=lambda *args: seen.append(args))
        await pool.scale(1)
        await asyncio.gather(submit(pool, "a"), submit(pool, "b"))
        await pool.stop()

    run(main())
    [(spec, metrics, predict_ms, batch_len, queue_ms)] = seen
    assert spec.model_name == "echo"
    assert metrics[0]["name"] == "FakeBatchSize"
    assert metrics[0]["value"] == 2
    assert (predict_ms, batch_len) == (1.5, 2)
    assert queue_ms >= 0


# ---- failures ---------------------------------------------------------------------------


def test_worker_sigkilled_mid_batch_fails_the_batch_and_is_replaced(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> tuple[list[BaseException | None], InferenceResult]:
        pool = make_pool(make_spec(batch_size=2))
        await pool.scale(1)
        old = pids(pool)[0]
        batch = [submit(pool, "victim", **{"x-kill": "1"}), submit(pool, "bystander")]
        await asyncio.wait(batch)
        errors = [f.exception() for f in batch]
        await pool.wait_until(healthy_with_new_pid(old))
        after = await ask(pool, "after", b"ok")
        await pool.stop()
        return errors, after

    errors, after = run(main())
    assert all(isinstance(e, WorkerDied) for e in errors)
    assert [e.status_code for e in errors if isinstance(e, WorkerDied)] == [507, 507]
    assert errors[0] is not errors[1]
    assert after.body == b"ok"


def test_worker_exiting_mid_batch_is_a_500(make_spec: Callable[..., ModelSpec]) -> None:
    async def main() -> BaseException | None:
        pool = make_pool(make_spec())
        await pool.scale(1)
        failed = submit(pool, "bye", **{"x-exit": "3"})
        await asyncio.wait([failed])
        await pool.stop()
        return failed.exception()

    error = run(main())
    assert isinstance(error, WorkerDied)
    assert (error.status_code, error.message) == (500, "Worker died.")


def test_an_idle_worker_killed_from_outside_is_replaced(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> InferenceResult:
        pool = make_pool(make_spec())
        await pool.scale(1)
        old = pids(pool)[0]
        os.kill(old, 9)
        await pool.wait_until(healthy_with_new_pid(old))
        result = await ask(pool, "after", b"fine")
        await pool.stop()
        return result

    assert run(main()).body == b"fine"


def test_a_hung_worker_is_killed_after_response_timeout_and_replaced(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> tuple[BaseException | None, int]:
        pool = make_pool(make_spec(response_timeout=0.5))
        await pool.scale(1)
        old = pids(pool)[0]
        hung = submit(pool, "hang", **{"x-sleep": "60"})
        await asyncio.wait([hung])
        await pool.wait_until(healthy_with_new_pid(old))
        await pool.stop()
        return hung.exception(), old

    error, old = run(main())
    assert isinstance(error, WorkerDied)
    assert (error.status_code, error.message) == (500, "Worker died.")
    assert pid_gone(old)


def test_an_error_frame_fails_every_request_and_the_worker_keeps_serving(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> tuple[list[BaseException | None], list[int], InferenceResult]:
        pool = make_pool(make_spec(batch_size=2))
        await pool.scale(1)
        before = pids(pool)
        batch = [submit(pool, "bad", **{"x-fail": "599"}), submit(pool, "good")]
        await asyncio.wait(batch)
        after = await ask(pool, "next", b"still here")
        assert pids(pool) == before
        await pool.stop()
        return [f.exception() for f in batch], before, after

    errors, _, after = run(main())
    for error in errors:
        assert isinstance(error, BatchFailed)
        assert (error.status_code, error.error_type) == (599, "PredictionException")
        assert error.to_json()["type"] == "PredictionException"
        assert error.message == "fake prediction failure"
    assert after.body == b"still here"


# ---- streaming -------------------------------------------------------------------------


def test_streamed_chunks_reach_each_requests_sink_before_its_result(
    make_spec: Callable[..., ModelSpec], caplog: pytest.LogCaptureFixture
) -> None:
    events: list[bytes] = []

    def broken(result: InferenceResult) -> None:
        raise RuntimeError("sink bug")

    async def main() -> list[InferenceResult]:
        pool = make_pool(make_spec(batch_size=3))
        await pool.scale(1)
        deadline = asyncio.get_running_loop().time() + 60.0
        streamed = request("a", b"A", **{"x-stream": "2"})
        a = pool.batcher.submit(streamed, deadline, on_chunk=lambda r: events.append(r.body))
        a.add_done_callback(lambda _: events.append(b"final"))
        b = pool.batcher.submit(request("b", b"B"), deadline)  # no sink: the final result only
        c = pool.batcher.submit(request("c", b"C"), deadline, on_chunk=broken)
        results = list(await asyncio.gather(a, b, c))
        results.append(await ask(pool, "next", b"still here"))
        await pool.stop()
        return results

    results = run(main())
    assert events == [b"a:0", b"a:1", b"final"]
    assert [r.body for r in results] == [b"A", b"B", b"C", b"still here"]
    assert results[0].headers["x-batch"] == "a,b,c"
    assert "Streaming to request c failed" in caplog.text


def test_a_chunk_with_a_failing_status_fails_the_batch_and_the_worker_serves_on(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> tuple[BaseException | None, InferenceResult]:
        pool = make_pool(make_spec())
        await pool.scale(1)
        before = pids(pool)
        failed = submit(pool, "a", **{"x-stream": "2", "x-stream-status": "500"})
        await asyncio.wait([failed])
        after = await ask(pool, "next", b"still here")
        assert pids(pool) == before
        await pool.stop()
        return failed.exception(), after

    error, after = run(main())
    assert isinstance(error, ServeError)
    assert (error.status_code, error.message) == (500, "fake stream failure")
    assert after.body == b"still here"


def test_startup_timeout_is_a_load_error(make_spec: Callable[..., ModelSpec]) -> None:
    async def main() -> tuple[ScaleResult, int]:
        pool = make_pool(make_spec(startup_timeout=0.3, fake={"load_sleep": 60}), backoff=(60,))
        scaled = await pool.scale(1)
        healthy = pool.healthy_count
        await pool.stop()
        return scaled, healthy

    scaled, healthy = run(main())
    assert (scaled.ok, scaled.started, healthy) == (False, 0, 0)
    [error] = scaled.failures
    assert error.status_code == 500
    assert "startup_timeout (0.3 s)" in error.message


def test_a_load_error_frame_carries_status_and_traceback(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> ScaleResult:
        pool = make_pool(make_spec(fake={"load_fail": 507}), backoff=(60,))
        scaled = await pool.scale(1)
        await pool.stop()
        return scaled

    [error] = run(main()).failures
    assert isinstance(error, WorkerLoadError)
    assert (error.status_code, error.message) == (507, "fake load failure")
    assert "MemoryError" in error.traceback


def test_a_worker_exiting_during_load_reports_its_last_output(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> ScaleResult:
        spec = make_spec(fake={"load_exit": 3, "load_print": "ModuleNotFoundError: no numpy"})
        pool = make_pool(spec, backoff=(60,))
        scaled = await pool.scale(1)
        await pool.stop()
        return scaled

    [error] = run(main()).failures
    assert "exited with code 3" in error.message
    assert "ModuleNotFoundError: no numpy" in error.message


def test_failed_loads_are_retried_with_backoff_until_stopped(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> list[str]:
        pool = make_pool(make_spec(fake={"load_fail": 500}), backoff=(0, 0, 60))
        await pool.scale(1)
        await wait_for_log(pool, "Restarting a worker in 60 s")
        await pool.stop()
        return pool.recent_logs()

    failures = [line for line in run(main()) if "Load failed" in line]
    assert len(failures) == 3  # first load, then the two immediate retries


def test_requests_waiting_for_a_worker_that_fails_to_load_get_torchserves_500(
    make_spec: Callable[..., ModelSpec],
) -> None:
    """TorchServe answers "Worker died." to what waits for a model whose worker cannot
    load; they used to wait for a worker that never came."""

    async def main() -> tuple[ServeError, bool]:
        pool = make_pool(make_spec(fake={"load_fail": 500}), backoff=(60,))
        try:
            waiting = submit(pool, "r1")
            await pool.scale(1, wait=False)
            with pytest.raises(ServeError) as died:
                await waiting
            return died.value, pool.batcher.closed
        finally:
            await pool.stop()

    error, closed = run(main())
    assert (error.status_code, error.message) == (500, "Worker died.")
    assert not closed  # the model stays registered: its next worker may load


def test_a_closed_batcher_winds_the_pool_down(make_spec: Callable[..., ModelSpec]) -> None:
    async def main() -> list[int]:
        pool = make_pool(make_spec())
        await pool.scale(2)
        worker_pids = pids(pool)
        pool.batcher.close(ServiceUnavailable("unregistered"))
        await pool.wait_until(lambda p: not p.processes)
        await pool.stop()
        return worker_pids

    assert all(pid_gone(pid) for pid in run(main()))


# ---- devices, environment, logs ---------------------------------------------------------


def test_gpu_workers_are_assigned_round_robin(
    make_spec: Callable[..., ModelSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    async def main() -> tuple[list[dict[str, Any]], list[str]]:
        pool = make_pool(make_spec(device_type=DeviceType.GPU), gpu_count=lambda: 2)
        await pool.scale(3)
        described = pool.workers
        load = json.loads((await ask(pool, "l", **{"x-info": "load"})).body)
        await pool.stop()
        assert load["gpu_id"] == 0  # each GPU worker sees only its GPU, as cuda:0
        return described, pool.recent_logs()

    described, logs = run(main())
    assert [w["gpu"] for w in described] == [True, True, True]
    visible = [visible_devices(logs, w["id"]) for w in described]
    assert visible == ["0", "1", "0"]


def visible_devices(logs: list[str], worker_id: str) -> str:
    pattern = re.compile(rf"\[echo/{worker_id}\] CUDA_VISIBLE_DEVICES=(\S+)$")
    [value] = [m.group(1) for m in map(pattern.search, logs) if m]
    return value


def test_cpu_workers_hide_gpus_when_there_are_some(
    make_spec: Callable[..., ModelSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    async def main() -> bytes:
        pool = make_pool(make_spec(), gpu_count=lambda: 2)
        await pool.scale(1)
        result = await ask(pool, "e", **{"x-info": "env:CUDA_VISIBLE_DEVICES"})
        await pool.stop()
        return result.body

    assert json.loads(run(main())) == ""


def test_worker_gets_pythonpath_and_torch_threads(
    make_spec: Callable[..., ModelSpec], tmp_path: Path
) -> None:
    deps = tmp_path / "deps"

    async def main() -> tuple[str, list[str]]:
        pool = make_pool(make_spec(python_path=(str(deps),), torch_threads=3))
        await pool.scale(1)
        env = await ask(pool, "e", **{"x-info": "env:PYTHONPATH"})
        argv = await ask(pool, "a", **{"x-info": "argv"})
        await pool.stop()
        return json.loads(env.body), json.loads(argv.body)

    pythonpath, argv = run(main())
    entries = pythonpath.split(os.pathsep)
    assert entries[0] == str(Path(__file__).resolve().parent.parent)
    assert entries[1] == str(deps)
    assert argv[-2:] == ["--torch-threads", "3"]


def test_cpu_workers_share_the_cores_unless_torch_threads_is_set(
    make_spec: Callable[..., ModelSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 cores, 2 workers: 2 threads each (a continuously batching model's worker leaves a
    core to the server: tests/test_pool_continuous.py)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cores, "available_cores", lambda: 4)

    async def main() -> list[tuple[list[str], str]]:
        pool = make_pool(make_spec())
        await pool.scale(2)
        seen = []
        for rid in ("a", "b"):  # one request per worker: each answers with its own view
            argv = await ask(pool, rid, **{"x-info": "argv"})
            omp = await ask(pool, rid + "e", **{"x-info": "env:OMP_NUM_THREADS"})
            seen.append((json.loads(argv.body), json.loads(omp.body)))
        await pool.stop()
        return seen

    for argv, omp in run(main()):
        assert argv[-2:] == ["--torch-threads", "2"]
        assert omp == "2"


def test_worker_output_goes_to_the_log_and_the_ring_buffer(
    make_spec: Callable[..., ModelSpec], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jupyter_serve.worker")

    async def main() -> tuple[list[str], str]:
        pool = make_pool(make_spec())
        await pool.scale(1)
        worker_id = pool.workers[0]["id"]
        await ask(pool, "p", **{"x-print": "hello from the handler"})
        await pool.stop()
        return pool.recent_logs(), worker_id

    logs, worker_id = run(main())
    prefix = f"[echo/{worker_id}]"
    assert any(line.endswith(f"{prefix} hello from the handler") for line in logs)
    assert any(line.endswith(f"{prefix} fake worker stderr") for line in logs)
    records = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert (logging.INFO, f"{prefix} hello from the handler") in records
    assert (logging.WARNING, f"{prefix} fake worker stderr") in records


def test_a_shared_log_buffer_keeps_the_newest_lines(make_spec: Callable[..., ModelSpec]) -> None:
    from collections import deque

    buffer: deque[str] = deque(maxlen=3)

    async def main() -> WorkerPool:
        pool = make_pool(make_spec(), log_buffer=buffer)
        await pool.scale(1)
        await ask(pool, "p", **{"x-print": "last words"})
        await pool.stop()
        return pool

    pool = run(main())
    assert len(buffer) == 3
    assert pool.recent_logs(1) == [buffer[-1]]
    assert pool.recent_logs(0) == []


def test_worker_memory_usage_and_state(make_spec: Callable[..., ModelSpec]) -> None:
    async def main() -> None:
        pool = make_pool(make_spec())
        await pool.scale(1)
        [worker] = pool.processes
        assert isinstance(worker, SubprocessWorker)
        assert worker.state is WorkerState.READY
        assert worker.memory_usage() > 1024 * 1024
        await pool.stop()
        assert worker.state is WorkerState.STOPPED
        assert worker.memory_usage() == 0

    run(main())


async def wait_for_log(pool: WorkerPool, text: str) -> None:
    """Wait until the pool logs a line containing `text`."""
    seen = asyncio.Event()
    if any(text in line for line in pool.recent_logs()):
        return
    unsubscribe = pool.log.subscribe(lambda line: seen.set() if text in line else None)
    try:
        await seen.wait()
    finally:
        unsubscribe()


def test_memory_falls_back_to_proc_without_psutil() -> None:
    from jupyter_serve.server.pool import stats

    rss = stats._proc_rss_bytes(os.getpid())
    assert rss > 1024 * 1024
    assert stats._proc_rss_bytes(2**22 + 12345) == 0  # beyond pid_max: no such process


# ---- the real worker (python -m jupyter_serve.worker) ----------------------------------

ECHO_HANDLER = """
def handle(data, context):
    if data is None:  # the load-time call of a function handler
        return None
    bodies = [row["body"] for row in data]
    if "boom" in bodies:
        raise RuntimeError("boom")
    return [f"{len(bodies)}:{body}" for body in bodies]
"""


def real_model(folder: Path, handler_source: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "handler.py").write_text(handler_source)
    manifest = {"runtime": "python", "model": {"modelName": "echo", "handler": "handler.py"}}
    (folder / "MAR-INF").mkdir()
    (folder / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    return folder


def text_request(rid: str, text: str) -> InferenceRequest:
    return InferenceRequest(rid, {}, (Parameter("body", "text/plain", text.encode()),))


def real_pool(spec: ModelSpec, **options: Any) -> WorkerPool:
    options.setdefault("backoff", (60,))
    return WorkerPool(spec, Batcher.for_spec(spec), gpu_count=lambda: 0, **options)


def test_real_worker_serves_batches_reports_metrics_and_survives_a_handler_error(
    make_spec: Callable[..., ModelSpec], tmp_path: Path
) -> None:
    seen: list[tuple[Any, ...]] = []
    model_dir = real_model(tmp_path / "echo", ECHO_HANDLER)
    spec = make_spec(model_dir=str(model_dir), handler="handler:handle", batch_size=3)

    async def main() -> tuple[list[InferenceResult], BaseException | None, InferenceResult]:
        pool = real_pool(spec, on_metrics=lambda *args: seen.append(args))
        assert (await pool.scale(1)).ok
        deadline = asyncio.get_running_loop().time() + 60.0
        batch = [pool.batcher.submit(text_request(f"r{i}", f"hi{i}"), deadline) for i in range(3)]
        results = list(await asyncio.gather(*batch))
        failed = pool.batcher.submit(text_request("bad", "boom"), deadline)
        await asyncio.wait([failed])
        after = await pool.batcher.submit(text_request("after", "again"), deadline)
        await pool.stop()
        return results, failed.exception(), after

    results, error, after = run(main())
    assert [r.body for r in results] == [b"3:hi0", b"3:hi1", b"3:hi2"]
    assert isinstance(error, BatchFailed)
    assert error.status_code == 503
    assert "boom" in error.traceback
    assert after.body == b"1:again"
    names = {metric["name"] for _, metrics, *_ in seen for metric in metrics}
    assert "PredictionTime" in names
    assert [batch_len for *_, batch_len, _ in seen] == [3, 1]


def test_real_worker_load_failure_names_the_handler_and_carries_its_traceback(
    make_spec: Callable[..., ModelSpec], tmp_path: Path
) -> None:
    source = 'raise RuntimeError("cannot read the weights")\n'
    model_dir = real_model(tmp_path / "broken", source)
    spec = make_spec(model_dir=str(model_dir), handler="handler:handle")

    async def main() -> ScaleResult:
        pool = real_pool(spec)
        scaled = await pool.scale(1)
        await pool.stop()
        return scaled

    [error] = run(main()).failures
    assert error.status_code == 500
    assert "handler" in error.message
    assert "cannot read the weights" in error.traceback


def test_ping_counts_loading_and_recently_failed_workers_as_torchserve(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> tuple[int, int, int, int]:
        loading = make_pool(make_spec(fake={"load_sleep": 60}))
        await loading.scale(1, wait=False)
        counts = (loading.healthy_count, loading.ping_healthy_count)
        await loading.stop()
        failing = make_pool(make_spec(fake={"load_exit": 3}), backoff=(60,))
        scaled = await failing.scale(1)
        assert not scaled.ok
        within_window = failing.ping_healthy_count
        failing.spec = failing.spec.with_changes(max_retry_timeout=0)
        past_window = failing.ping_healthy_count
        await failing.stop()
        return (*counts, within_window, past_window)

    assert run(main()) == (0, 1, 1, 0)
