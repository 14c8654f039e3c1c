"""Register -> first prediction on `jupyter serve`, workers forked from the factory or fresh.

    python bench/register_timing.py [--model mlp] [--repeats 5] [--out register.json]

Starts two `jupyter serve` processes on the benchmark's model store, one with
`--ServeApp.fork_workers=True` (the default) and one with `=False`. Each registers
and unregisters the echo model once (some model has started a worker, so the
worker factory is up), then, `repeats` times and alternating between the two
servers: register `model` synchronously with one worker (batch 1), time until its
first good prediction exactly as run.py does, unregister.
Prints the times in seconds and their medians, and writes them as JSON with
`--out`. TorchServe is not started: compare with run.py's register rows.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers
import workloads
from points import first_prediction, target

SETTINGS = {"forked": "--ServeApp.fork_workers=True", "fresh": "--ServeApp.fork_workers=False"}


def time_register(server: servers.JupyterServe, workload: workloads.Workload) -> float:
    """Seconds from the register call to the first good prediction."""
    began = time.perf_counter()
    server.register(workload.model, 1, 5, 1)
    first_prediction(target(server, workload))
    seconds = time.perf_counter() - began
    server.unregister(workload.model)
    return seconds


def measure(work: Path, model: str, repeats: int) -> dict[str, list[float]]:
    store = work / "store"
    workloads.build_store(store)
    chosen = workloads.workloads()[model]
    running = {
        name: servers.JupyterServe(work / name, store, args=(setting,))
        for name, setting in SETTINGS.items()
    }
    times: dict[str, list[float]] = {name: [] for name in running}
    try:
        for server in running.values():
            server.start()
            server.register("echo", 1, 5, 1)
            server.unregister("echo")
        for _ in range(repeats):
            for name, server in running.items():
                times[name].append(round(time_register(server, chosen), 3))
    finally:
        for server in running.values():
            server.stop()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlp", choices=workloads.MODELS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", help="write the times as JSON here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jupyter_serve_register_"))
    try:
        times = measure(work, args.model, args.repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    result = {"model": args.model, "times_s": times, "median_s": medians}
    result["forked_vs_fresh"] = round(medians["forked"] / medians["fresh"], 3)
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
