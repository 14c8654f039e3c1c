"""What one body costs the Jupyter server between the client's socket and the worker's handler.

Issue 25's point 3: a body should be copied at most twice each way. Copies cost the
Jupyter server's own CPU (its one event loop), so this measures that CPU per
request, by body size, through the serve lane: the echo model (its handler returns
the body it got, so every byte travels in and back out), one worker, batch 1, one
client on one keep-alive connection. The server's CPU µs per request (its process
alone, not the worker's) grows with the body by what each byte costs the server;
`server_ns_per_kib` is that slope between the smallest and the largest body.

    python bench/body_copies.py [--sizes 1024,65536,1048576,4194304] [--seconds 4]
                                [--out bench/RESULTS-copies.json] [--label after]

Running it on two commits (`--label before` / `--label after`, same `--out`) puts both
side by side in one results file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import loadgen  # noqa: E402
import servers  # noqa: E402
import workloads  # noqa: E402

DEFAULT_SIZES = (1024, 65536, 1048576, 4194304)  # under TorchServe's 6.5 MB limits
MAX_REQUESTS = 20000


def body_of(size: int) -> bytes:
    """`size` seeded random bytes (nothing compresses or caches them)."""
    return random.Random(size).randbytes(size)


def measure(server: servers.JupyterServe, size: int, seconds: float) -> dict[str, Any]:
    """Closed loop, one client, for `seconds`: the server's and the worker's CPU per request."""
    body = body_of(size)
    headers = tuple(server.headers.items())
    check = workloads.echo_check(body)
    load = loadgen.Target(
        server.predict_url("echo"), body, "application/octet-stream", headers, check
    )
    asyncio.run(loadgen.closed_loop(load, 1, 20, seconds))  # warm: first requests, allocator
    server_before = servers.tree_cpu([server.server_pid])
    workers_before = servers.tree_cpu(server.worker_pids())
    began = time.perf_counter()
    tally = asyncio.run(loadgen.closed_loop(load, 1, MAX_REQUESTS, seconds))
    wall = time.perf_counter() - began
    server_cpu = servers.tree_cpu([server.server_pid]) - server_before
    worker_cpu = servers.tree_cpu(server.worker_pids()) - workers_before
    summary = tally.summary()
    ok = int(summary["ok"] or 0)
    if not ok or summary["errors"]:
        raise RuntimeError(f"{size} B: {summary}")
    return {
        "bytes": size,
        "requests": ok,
        "server_cpu_us_per_req": round(1e6 * server_cpu / ok, 1),
        "worker_cpu_us_per_req": round(1e6 * worker_cpu / ok, 1),
        "wall_us_per_req": round(1e6 * wall / ok, 1),
        "p50_ms": summary["p50_ms"],
    }


def slope_ns_per_kib(points: list[dict[str, Any]]) -> float | None:
    """The server's CPU per KiB of body, from the smallest to the largest body."""
    if len(points) < 2:
        return None
    low, high = points[0], points[-1]
    kib = (high["bytes"] - low["bytes"]) / 1024
    extra_us = high["server_cpu_us_per_req"] - low["server_cpu_us_per_req"]
    return round(1000 * extra_us / kib, 1)


def run(sizes: list[int], seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="body-copies-") as work:
        folder = Path(work)
        store = folder / "store"
        workloads.build_store(store, ("echo",))
        server = servers.JupyterServe(folder / "serve", store)
        try:
            server.start()
            server.register("echo", batch_size=1, delay_ms=0, workers=1)
            points = [measure(server, size, seconds) for size in sizes]
        finally:
            server.stop()
    return {"points": points, "server_ns_per_kib": slope_ns_per_kib(points)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=BENCH / "RESULTS-copies.json")
    parser.add_argument("--label", default="now")
    args = parser.parse_args()
    result = run([int(size) for size in args.sizes.split(",")], args.seconds)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results[args.label] = result
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
