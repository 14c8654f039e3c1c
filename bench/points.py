"""One measured point of the benchmark: its target, the first good prediction, the measurement."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

import loadgen
import psutil
import servers
import workloads
from options import Plan


@contextlib.contextmanager
def pinned() -> Iterator[None]:
    """Pin this thread (the load generator) to the last CPU while a point runs."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[-1]})
    try:
        yield
    finally:
        os.sched_setaffinity(0, set(cpus))


def target(server: servers.Server, workload: workloads.Workload) -> loadgen.Target:
    url = server.predict_url(workload.model)
    headers = tuple(server.headers.items())
    return loadgen.Target(url, workload.body, workload.content_type, headers, workload.check)


def measure(server: servers.Server, load: loadgen.Target, concurrency: int, seconds: float,
            plan: Plan, rate: float | None = None) -> dict[str, Any]:  # fmt: skip
    """One point: the load generator's summary plus machine load and server CPU."""
    psutil.cpu_percent()
    cpu_before = server.cpu_seconds()
    with pinned():
        if rate:
            run = loadgen.open_loop(load, rate, concurrency, plan.max_requests, seconds)
        else:
            run = loadgen.closed_loop(load, concurrency, plan.max_requests, seconds)
        tally = asyncio.run(run)
    used = server.cpu_seconds() - cpu_before
    point: dict[str, Any] = tally.summary()
    point["cpu_percent"] = psutil.cpu_percent()
    point["load1"] = round(os.getloadavg()[0], 2)
    point["cpu_ms_per_req"] = round(1000 * used / point["ok"], 3) if point["ok"] else None
    return point


def first_prediction(load: loadgen.Target, limit: float = 120.0) -> None:
    async def once() -> bool:
        connection = loadgen.Connection(load)
        try:
            status, body = await connection.exchange()
        finally:
            connection.close()
        return load.check(status, body)

    deadline = time.perf_counter() + limit
    while not asyncio.run(once()):
        if time.perf_counter() > deadline:
            raise RuntimeError(f"no good prediction from {load.url}")
