"""Micro-benchmark: what the batcher + pool + worker hop adds to one small request.

Runs an echo handler in one real worker and sends requests one at a time (closed
loop, concurrency 1), then 32 at a time; prints p50/p99 latency and req/s. No HTTP:
this isolates the worker round trip (issue 3's "well under 1 ms" target).

    python bench/worker_roundtrip.py [--requests 2000] [--payload 3072]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from jupyter_serve.server.batching import Batcher
from jupyter_serve.server.models import ModelSpec
from jupyter_serve.server.pool import WorkerPool
from jupyter_serve.wire.protocol import InferenceRequest, Parameter

ECHO = (
    "def handle(data, context):\n    return None if data is None else [r['body'] for r in data]\n"
)


def echo_spec(folder: Path, batch_size: int, policy: str) -> ModelSpec:
    (folder / "handler.py").write_text(ECHO)
    (folder / "MAR-INF").mkdir()
    manifest = {"runtime": "python", "model": {"modelName": "echo", "handler": "handler.py"}}
    (folder / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    return ModelSpec(
        model_name="echo", version="1.0", model_dir=str(folder), handler="handler.py",
        manifest=manifest, batch_size=batch_size, max_batch_delay=0.005, batch_policy=policy,
    )  # fmt: skip


async def measure(
    pool: WorkerPool, requests: int, payload: bytes, concurrency: int
) -> dict[str, float]:
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    counter = iter(range(requests))

    async def client() -> None:
        for i in counter:
            request = InferenceRequest(
                str(i), {}, (Parameter("body", "application/octet-stream", payload),)
            )
            start = time.perf_counter()
            await pool.batcher.submit(request, loop.time() + 30)
            latencies.append(time.perf_counter() - start)

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    ordered = sorted(latencies)
    return {
        "concurrency": concurrency,
        "rps": round(requests / elapsed),
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 3),
    }


async def main(args: argparse.Namespace) -> None:
    payload = b"x" * args.payload
    for policy in ("eager", "strict"):
        with tempfile.TemporaryDirectory() as tmp:
            spec = echo_spec(Path(tmp), batch_size=8, policy=policy)
            pool = WorkerPool(spec, Batcher.for_spec(spec), gpu_count=lambda: 0)
            assert (await pool.scale(1)).ok
            await measure(pool, 200, payload, 1)  # warm up
            for concurrency in (1, 32):
                result = await measure(pool, args.requests, payload, concurrency)
                print(json.dumps({"policy": policy, "batch": "8/5ms", **result}))
            await pool.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--payload", type=int, default=3072)
    asyncio.run(main(parser.parse_args()))
