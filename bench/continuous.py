"""The continuous-batching part: streamed answers under Poisson arrivals near capacity.

One model shape (bench/handlers/steps_handler.py: a number of steps per request drawn from
its request id, geometric with mean 8; a fixed cost per step for the whole batch; one
chunk per step), archived twice: `steps_cb` with `continuousBatching: true` and
`steps_static` without it (static batching: a batch runs to the end of its longest
request). Batch size 8, one worker. Each server gets the same open-loop load: requests
start at Poisson arrival times (seeded) at `RATE_OF_CAPACITY` of the continuous batch's
capacity (batch size / (mean steps x step cost)), each on a connection of its own pool,
for `seconds`; every answer's time to first chunk and to its end are measured from the
request's scheduled start (no coordinated omission).

Participants: jupyter_serve with `steps_cb` (`cb`), TorchServe 0.12 with `steps_cb`, and
jupyter_serve with `steps_static` (`static`), at STEP_MS per step. `ratios` gives
`cb_rps_vs_torchserve`, `cb_first_chunk_p50_vs_torchserve` and `cb_rps_vs_static_batching`.

Then a sweep of smaller step costs (SWEEP_STEP_MS), continuous batching only, on both
servers at the same fraction of that step's capacity: a server's fixed cost per step
(its turnaround between two handler calls) weighs more as the step shrinks, so the
ratio to TorchServe depends on the step cost, and the sweep shows how
(`cb_rps_vs_torchserve_<N>ms`).
"""

from __future__ import annotations

import asyncio
import random
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import servers
from workloads import HANDLERS

from jupyter_serve.archive import ArchiveSpec, build_mar

BATCH = 8
MEAN_STEPS = 8
STEP_MS = 5.0
SWEEP_STEP_MS = (2.0, 1.0)  # smaller steps, where the per-step overheads weigh more
RATE_OF_CAPACITY = 0.8
CONNECTIONS = 256
JS_CB, TS_CB, JS_STATIC = "jupyter_serve_cb", "torchserve_cb", "jupyter_serve_static"
CONFIG = "batchSize: 8\nmaxBatchDelay: 5\nminWorkers: 1\nmaxWorkers: 1\n"

Log = Callable[[str], None]


def capacity(step_ms: float = STEP_MS) -> float:
    """Requests per second one worker's full continuous batch finishes."""
    return BATCH / (MEAN_STEPS * step_ms / 1000)


def cb_model(step_ms: float) -> str:
    return "steps_cb" if step_ms == STEP_MS else f"steps_cb_{step_ms:g}ms"


def build(store: Path) -> None:
    """steps_cb.mar, steps_static.mar and a steps_cb_<N>ms.mar per swept step cost."""
    work = store / "steps-src"
    work.mkdir(parents=True, exist_ok=True)
    models = [(cb_model(step), step, "continuousBatching: true\n")
              for step in (STEP_MS, *SWEEP_STEP_MS)]  # fmt: skip
    for name, step_ms, extra in (*models, ("steps_static", STEP_MS, "")):
        config = work / f"{name}.yaml"
        config.write_text(f"{CONFIG}handler:\n  step_ms: {step_ms:g}\n{extra}")
        spec = ArchiveSpec(model_name=name, version="1.0",
                           handler=str(HANDLERS / "steps_handler.py"),
                           config_file=str(config), export_path=str(store), force=True)  # fmt: skip
        build_mar(spec)


@dataclass
class Tally:
    first_chunk: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    finished: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None


async def one(url: urllib.parse.SplitResult, head: bytes, pool: asyncio.Queue[Any],
              scheduled: float, tally: Tally) -> None:  # fmt: skip
    connection = await pool.get()
    try:
        if connection is None:
            connection = await asyncio.open_connection(url.hostname, url.port)
        reader, writer = connection
        writer.write(head)
        status_line = await reader.readuntil(b"\r\n\r\n")
        first = time.perf_counter()
        status = int(status_line.split(b" ", 2)[1])
        headers = status_line.lower()
        if b"transfer-encoding: chunked" in headers:
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                await reader.readexactly(size + 2)
            await reader.readexactly(2)
        else:
            length = int(headers.split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
        done = time.perf_counter()
        if status != 200:
            raise ValueError(f"status {status}")
        tally.first_chunk.append(first - scheduled)
        tally.latency.append(done - scheduled)
        tally.finished.append(done)
    except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
        tally.errors += 1
        tally.first_error = tally.first_error or f"{type(exc).__name__}: {exc}"
        connection = None
    finally:
        pool.put_nowait(connection)


async def poisson(predict_url: str, headers: dict[str, str], rate: float,
                  seconds: float) -> dict[str, Any]:  # fmt: skip
    url = urllib.parse.urlsplit(predict_url)
    lines = [f"POST {url.path} HTTP/1.1", f"Host: {url.netloc}", "Content-Length: 1",
             "Content-Type: text/plain", *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
    head = ("\r\n".join(lines) + "\r\n\r\n").encode() + b"x"
    pool: asyncio.Queue[Any] = asyncio.Queue()
    for _ in range(CONNECTIONS):
        pool.put_nowait(None)
    tally = Tally()
    arrivals = random.Random(0)
    began = time.perf_counter()
    scheduled, tasks = began, []
    while scheduled < began + seconds:
        await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))
        tasks.append(asyncio.ensure_future(one(url, head, pool, scheduled, tally)))
        scheduled += arrivals.expovariate(rate)
    await asyncio.gather(*tasks)
    while not pool.empty():
        connection = pool.get_nowait()
        if connection is not None:
            connection[1].close()
    return summary(tally, began, seconds, len(tasks))


def summary(tally: Tally, began: float, seconds: float, sent: int) -> dict[str, Any]:
    deadline = began + seconds
    return {
        "sent": sent,
        "ok": len(tally.latency),
        "errors": tally.errors,
        "first_error": tally.first_error,
        "rps": round(sum(t <= deadline for t in tally.finished) / seconds, 1),
        "first_chunk_p50_ms": percentile(tally.first_chunk, 50),
        "first_chunk_p99_ms": percentile(tally.first_chunk, 99),
        "latency_p50_ms": percentile(tally.latency, 50),
        "latency_p99_ms": percentile(tally.latency, 99),
    }


def percentile(values: list[float], pct: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(pct / 100 * len(ordered)))] * 1000, 2)


def run(work: Path, store: Path, seconds: float, with_torchserve: bool, log: Log) -> dict[str, Any]:
    """Every participant in turn, each alone on the machine; their points by name, then the
    sweep of smaller step costs (continuous batching only, half as long)."""
    build(store)
    makers: dict[str, Callable[[str], servers.Server]] = {
        JS_CB: lambda tag: servers.JupyterServe(work / f"js-{tag}", store),
        JS_STATIC: lambda tag: servers.JupyterServe(work / f"js-static-{tag}", store),
    }
    if with_torchserve:
        bin_dir = servers.ensure_torchserve_venv(work / "venv-ts.log")
        makers[TS_CB] = lambda tag: servers.TorchServe(work / f"ts-{tag}", store, bin_dir)
    rate = round(RATE_OF_CAPACITY * capacity(), 1)
    points: dict[str, Any] = {"rate": rate, "seconds": seconds, "step_ms": STEP_MS}
    for name in (JS_CB, TS_CB, JS_STATIC):
        if name in makers:
            model = "steps_static" if name == JS_STATIC else cb_model(STEP_MS)
            points[name] = measure(makers[name](model), model, rate, seconds)
            log(f"continuous batching, {name}: {points[name]}")
    points["sweep"] = []
    for step_ms in SWEEP_STEP_MS:
        swept = {"step_ms": step_ms, "rate": round(RATE_OF_CAPACITY * capacity(step_ms), 1)}
        for name in (JS_CB, TS_CB):
            if name in makers:
                model = cb_model(step_ms)
                swept[name] = measure(makers[name](model), model, swept["rate"], seconds / 2)
                log(f"continuous batching at {step_ms:g} ms steps, {name}: {swept[name]}")
        points["sweep"].append(swept)
    return points


def measure(server: servers.Server, model: str, rate: float, seconds: float) -> dict[str, Any]:
    """One server's point: registered with one worker, warmed at a quarter of the rate."""
    try:
        server.start()
        server.register(model, BATCH, 5, 1)
        asyncio.run(poisson(server.predict_url(model), server.headers, rate / 4, 1.0))
        return asyncio.run(poisson(server.predict_url(model), server.headers, rate, seconds))
    finally:
        server.stop()


def ratios(points: dict[str, Any]) -> dict[str, float | None]:
    """The headline ratios at STEP_MS, then `cb_rps_vs_torchserve_<N>ms` per swept step."""
    found = {
        "cb_rps_vs_torchserve": ratio(points, JS_CB, TS_CB, "rps"),
        "cb_first_chunk_p50_vs_torchserve": ratio(points, JS_CB, TS_CB, "first_chunk_p50_ms"),
        "cb_rps_vs_static_batching": ratio(points, JS_CB, JS_STATIC, "rps"),
    }
    for swept in points.get("sweep", []):
        tag = f"{swept['step_ms']:g}ms"
        found[f"cb_rps_vs_torchserve_{tag}"] = ratio(swept, JS_CB, TS_CB, "rps")
        found[f"cb_first_chunk_p50_vs_torchserve_{tag}"] = ratio(
            swept, JS_CB, TS_CB, "first_chunk_p50_ms"
        )
    return found


def ratio(points: dict[str, Any], ours: str, theirs: str, key: str) -> float | None:
    """points[ours][key] / points[theirs][key], None when either is missing."""
    a, b = ((points.get(name) or {}).get(key) for name in (ours, theirs))
    return None if a is None or not b else round(float(a) / float(b), 3)
