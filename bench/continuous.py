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
jupyter_serve with `steps_static` (`static`). `ratios` gives `cb_rps_vs_torchserve`,
`cb_first_chunk_p50_vs_torchserve` and `cb_rps_vs_static_batching`.
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
STEP_S = 0.005
RATE_OF_CAPACITY = 0.8
CONNECTIONS = 256
JS_CB, TS_CB, JS_STATIC = "jupyter_serve_cb", "torchserve_cb", "jupyter_serve_static"
CONFIG = (
    "batchSize: 8\nmaxBatchDelay: 5\nminWorkers: 1\nmaxWorkers: 1\n"
    f"handler:\n  step_ms: {STEP_S * 1000:g}\n"
)

Log = Callable[[str], None]


def capacity() -> float:
    """Requests per second one worker's full continuous batch finishes."""
    return BATCH / (MEAN_STEPS * STEP_S)


def build(store: Path) -> None:
    """steps_cb.mar and steps_static.mar into `store`."""
    work = store / "steps-src"
    work.mkdir(parents=True, exist_ok=True)
    for name, extra in (("steps_cb", "continuousBatching: true\n"), ("steps_static", "")):
        config = work / f"{name}.yaml"
        config.write_text(CONFIG + extra)
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
    """Every participant in turn, each alone on the machine; their points by name."""
    build(store)
    rate = round(RATE_OF_CAPACITY * capacity(), 1)
    participants: list[tuple[str, Callable[[], servers.Server], str]] = [
        (JS_CB, lambda: servers.JupyterServe(work / "js", store), "steps_cb"),
        (JS_STATIC, lambda: servers.JupyterServe(work / "js-static", store), "steps_static"),
    ]
    if with_torchserve:
        bin_dir = servers.ensure_torchserve_venv(work / "venv-ts.log")
        participants.insert(1, (TS_CB, lambda: servers.TorchServe(work / "ts", store, bin_dir),
                                "steps_cb"))  # fmt: skip
    points: dict[str, Any] = {"rate": rate, "seconds": seconds}
    for name, make, model in participants:
        server = make()
        try:
            server.start()
            server.register(model, BATCH, 5, 1)
            asyncio.run(poisson(server.predict_url(model), server.headers, rate / 4, 1.0))
            point = asyncio.run(poisson(server.predict_url(model), server.headers, rate, seconds))
        finally:
            server.stop()
        points[name] = point
        log(f"continuous batching, {name}: {point}")
    return points


def ratios(points: dict[str, Any]) -> dict[str, float | None]:
    def value(name: str, key: str) -> float | None:
        point = points.get(name) or {}
        found = point.get(key)
        return None if found is None else float(found)

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else round(a / b, 3)

    return {
        "cb_rps_vs_torchserve": ratio(value(JS_CB, "rps"), value(TS_CB, "rps")),
        "cb_first_chunk_p50_vs_torchserve": ratio(
            value(JS_CB, "first_chunk_p50_ms"), value(TS_CB, "first_chunk_p50_ms")
        ),
        "cb_rps_vs_static_batching": ratio(value(JS_CB, "rps"), value(JS_STATIC, "rps")),
    }
