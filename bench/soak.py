"""Soak jupyter_serve: steady load while its workers are killed; count what clients got.

    python bench/soak.py [--soak-model mlp] [--soak-seconds 120] [--soak-concurrency 64]
                         [--kill-every 10] [--hang 30] --out soak.json
    python bench/run.py ... --soak       (the benchmark runs it after its points: "soak")

Starts `jupyter serve` as the benchmark does, registers the model (batch 8, 5 ms, 2
workers), then drives it with that many keep-alive clients for that long while one of
its workers is SIGKILLed every `--kill-every` seconds. Every request is bounded by
`--hang` seconds: one that gets no answer by then counts as hung (and its
connection is dropped). The report counts answered (200 with a good body), failed
(by status or error), hung requests and the kills, and samples the server
process's RSS and open file descriptors every 5 s, so growth shows (a leak per
killed worker, per failed request...). Not part of CI: it takes minutes and kills
processes on purpose.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadgen
import points
import servers
import workloads

SAMPLE_EVERY = 5.0  # seconds between RSS / FD samples


@dataclass
class Counts:
    """What the clients got, and what the server process held over time."""

    answered: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    hung: int = 0
    kills: list[int] = field(default_factory=list)
    samples: list[dict[str, float]] = field(default_factory=list)

    def report(self, seconds: float) -> dict[str, Any]:
        return {
            "seconds": round(seconds, 1),
            "answered": self.answered,
            "failed": sum(self.failed.values()),
            "failed_by_reason": dict(self.failed.most_common(10)),
            "hung": self.hung,
            "workers_killed": len(self.kills),
            "rss_mib": _span([sample["rss_mib"] for sample in self.samples]),
            "fds": _span([sample["fds"] for sample in self.samples]),
            "samples": self.samples,
        }


def _span(values: list[float]) -> dict[str, float]:
    """Before the load, at its first sample (the clients' sockets open), at the end, and
    the growth under load: what a leak per killed worker or failed request would show."""
    loaded = values[1] if len(values) > 1 else values[0]
    return {"idle": values[0], "loaded": loaded, "end": values[-1], "max": max(values),
            "growth_under_load": round(values[-1] - loaded, 1)}  # fmt: skip


async def client(load: loadgen.Target, counts: Counts, deadline: float, hang: float) -> None:
    connection = loadgen.Connection(load)
    while time.perf_counter() < deadline:
        try:
            status, body = await asyncio.wait_for(connection.exchange(), hang)
        except asyncio.TimeoutError:
            counts.hung += 1
            connection.close()
            continue
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            counts.failed[type(exc).__name__] += 1
            connection.close()
            continue
        if load.check(status, body):
            counts.answered += 1
        else:
            counts.failed[f"status {status}"] += 1


async def killer(server: servers.JupyterServe, counts: Counts, every: float, end: float) -> None:
    rng = random.Random(0)
    while time.perf_counter() + every < end:
        await asyncio.sleep(every)
        pids = server.worker_pids()
        if pids:
            victim = rng.choice(pids)
            os.kill(victim, signal.SIGKILL)
            counts.kills.append(victim)


async def sampler(pid: int, counts: Counts, end: float) -> None:
    process = psutil.Process(pid)
    began = time.perf_counter()
    while True:
        counts.samples.append({
            "t": round(time.perf_counter() - began, 1),
            "rss_mib": round(process.memory_info().rss / (1 << 20), 1),
            "fds": process.num_fds(),
        })  # fmt: skip
        if time.perf_counter() + SAMPLE_EVERY > end:
            return
        await asyncio.sleep(SAMPLE_EVERY)


async def drive(server: servers.JupyterServe, args: argparse.Namespace) -> dict[str, Any]:
    load = points.target(server, workloads.workloads()[args.soak_model])
    counts = Counts()
    began = time.perf_counter()
    end = began + args.soak_seconds
    await asyncio.gather(
        *(client(load, counts, end, args.hang) for _ in range(args.soak_concurrency)),
        killer(server, counts, args.kill_every, end),
        sampler(server.server_pid, counts, end),
    )
    return counts.report(time.perf_counter() - began)


def soak(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Start a server in `work`, soak it, stop it; the report."""
    store = work / "store"
    workloads.build_store(store)
    server = servers.JupyterServe(work / "soak", store)
    try:
        server.start()
        server.register(args.soak_model, 8, 5, 2)
        result = asyncio.run(drive(server, args))
    finally:
        server.stop()
    return {"model": args.soak_model, "concurrency": args.soak_concurrency,
            "kill_every_s": args.kill_every, **result}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--out", required=True, help="the report (JSON)")
    return parser.parse_args(argv)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The soak's options (shared with `bench/run.py --soak`)."""
    parser.add_argument("--soak-model", default="mlp")
    parser.add_argument("--soak-seconds", type=float, default=120.0)
    parser.add_argument("--soak-concurrency", type=int, default=64)
    parser.add_argument("--kill-every", type=float, default=10.0, help="seconds between kills")
    parser.add_argument("--hang", type=float, default=30.0, help="seconds before a request hangs")


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="jupyter_serve_soak_") as work:
        report = soak(Path(work), args)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=1))


if __name__ == "__main__":
    main()
