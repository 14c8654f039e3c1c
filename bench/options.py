"""bench/run.py's command line (`parse_args`), what it makes of it (`Plan`) and the run's `meta`."""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import sys
from dataclasses import dataclass
from typing import Any

import hub_launcher
import psutil
import servers
import soak

DESCRIPTION = (
    "Benchmark jupyter_serve against TorchServe 0.12 and the in-process limit, in one run."
)
CONFIGS = {"batch1/1w": (1, 5, 1), "batch8-5ms/1w": (8, 5, 1), "batch8/2w": (8, 5, 2)}


@dataclass(frozen=True)
class Plan:
    """How long and how often each point runs."""

    concurrencies: tuple[int, ...]
    repeats: int
    seconds: float
    cnn_seconds: float
    warm_seconds: float
    max_requests: int
    inprocess_seconds: float
    cnn_batches: str

    @classmethod
    def for_args(cls, args: argparse.Namespace) -> Plan:
        if args.quick:
            return cls((1, 32), 1, 1.0, 1.0, 0.3, 20_000, 0.3, "1,8")
        return cls((1, 8, 32), args.repeats, args.seconds, 2 * args.seconds, 1.0, 200_000, 3.0,
                   "1,8,32")  # fmt: skip


def meta(args: argparse.Namespace) -> dict[str, Any]:
    # torch's version from its metadata: the runner never imports torch (workloads.py says why)
    torch_version = importlib.metadata.version("torch")

    cpu = platform.processor() or platform.machine()
    memory = psutil.virtual_memory().total / (1 << 30)
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": next(
            (m for m in ("memory", "stall", "hub", "cb", "llm", "quick") if getattr(args, m)),
            "full",
        ),
        "machine": f"{os.cpu_count()} CPUs ({cpu}), {memory:.0f} GiB, Python "
        f"{platform.python_version()}, torch {torch_version}, load at start "
        f"{os.getloadavg()[0]:.2f}; shared and noisy: compare ratios, not absolutes",
        "argv": sys.argv[1:],
        "torchserve": args.torchserve,
        "transformers_serve": args.transformers_serve,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--out", required=True, help="results JSON (a .md report goes beside it)")
    parser.add_argument("--quick", action="store_true", help="CI smoke: short points, 1 repeat")
    parser.add_argument("--memory", action="store_true", help="only the memory part (minutes)")
    parser.add_argument("--stall", action="store_true", help="only the stall probe (a minute)")
    parser.add_argument("--hub", action="store_true", help="only the hub part (a minute or two)")
    parser.add_argument("--cb", action="store_true", help="only the continuous-batching part")
    parser.add_argument("--llm", action="store_true", help="only the LLM part (bench/llm.py)")
    parser.add_argument("--no-torchserve", dest="torchserve", action="store_false")
    parser.add_argument(
        "--no-transformers-serve",
        dest="transformers_serve",
        action="store_false",
        help="the LLM part without its transformers serve peer",
    )
    parser.add_argument(
        "--omp1",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run both servers with OMP_NUM_THREADS=1 (default: in full mode)",
    )
    parser.add_argument("--models", default="echo,mlp,cnn")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="per point (cnn: twice)")
    parser.add_argument("--rate", type=float, help="add an open-loop echo point at this req/s")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    parser.add_argument("--soak", action="store_true", help="then soak: bench/soak.py's report")
    soak.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.omp1 is None:
        args.omp1 = not (args.quick or args.memory or args.stall or args.hub or args.llm)
    if args.stall or args.hub or args.llm:
        args.torchserve = False  # these parts compare jupyter_serve with others than TorchServe
    if args.hub and hub_launcher.available():
        parser.error(f"the hub part needs a hub: {hub_launcher.available()}")
    if args.torchserve and not servers.java_available():
        parser.error("TorchServe needs java on PATH (or pass --no-torchserve)")
    return args
