"""Profile the jupyter_serve server (or one worker) under load with py-spy; print where time goes.

    python bench/profile_server.py [--model echo] [--config batch8-5ms/1w] [-c 32] [--seconds 6]
                                   [--target server|worker]

Starts `jupyter serve` (as the benchmark does), registers the model, drives it
with the load generator (pinned to the last core) while `py-spy record` samples
the server process, then prints the share of samples per function, inclusive
(on the stack) and self (at the top), from py-spy's collapsed stacks. Needs
`py-spy` in this venv (`pip install py-spy`).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadgen
import run
import servers
import workloads


def _frame(frame: str) -> str:
    """`function (path/to/file.py:12)` -> `function (file.py)`: lines merged per function."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit('/', 1)[-1].split(':')[0].rstrip(')')})"


def collapse(raw: str) -> tuple[Counter[str], Counter[str], int]:
    """Inclusive and self sample counts per frame from py-spy's `--format raw` lines."""
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_frame(frame) for frame in stack.split(";")]
        total += int(count)
        leaf[frames[-1]] += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
    return inclusive, leaf, total


def profile(args: argparse.Namespace, work: Path) -> str:
    store = work / "store"
    workloads.build_store(store)
    server = servers.JupyterServe(work / "js", store)
    try:
        server.start()
        batch, delay, workers = run.CONFIGS[args.config]
        server.register(args.model, batch, delay, workers)
        load = run.target(server, workloads.workloads()[args.model])
        out = work / "profile.txt"
        spy = [str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking", "-r", "250"]
        if args.target == "worker":
            spy.append("--idle")  # a worker's waits for its next batch are the point
        argv = [*spy, "-f", "raw", "-d", str(int(args.seconds)), "-o", str(out)]
        # the last child: a worker (the first may be the worker factory)
        pid = server.server_pid if args.target == "server" else server.worker_pids()[-1]
        sampler = subprocess.Popen([*argv, "-p", str(pid)])
        with run.pinned():
            tally = asyncio.run(loadgen.closed_loop(load, args.c, 10**6, args.seconds))
        sampler.wait(timeout=120)
        print(tally.summary())
        return out.read_text()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="echo", choices=workloads.MODELS)
    parser.add_argument("--config", default="batch8-5ms/1w", choices=list(run.CONFIGS))
    parser.add_argument("-c", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--target", choices=("server", "worker"), default="server")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jupyter_serve_profile_"))
    try:
        inclusive, leaf, total = collapse(profile(args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for title, counts in (("inclusive", inclusive), ("self", leaf)):
        print(f"\n{title} (% of {total} samples)")
        for frame, count in counts.most_common(args.top):
            print(f"{100 * count / total:6.1f}  {frame}")


if __name__ == "__main__":
    main()
