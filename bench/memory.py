"""The benchmark's memory part: what each server costs the machine, from /proc/PID/smaps_rollup.

PSS (proportional set size) counts a page that N processes share as 1/N in each,
so the PSS of a process tree is what the tree costs the machine: torch's pages
that a forked worker shares with the worker factory count once, as do a model's
weights mapped from one file by every worker (RSS would count them again in
every process).

`Memory(servers, workloads, repeats, first_prediction).run()` takes each step on
every server in turn (the servers run side by side, so each step sees the same
machine), and returns one record per server:

1. `echo` with 1 worker: the PSS of the whole server tree (jupyter_serve: the
   Jupyter server, the worker factory and the worker; TorchServe: the JVM and its
   worker) right after it answered its first prediction (`fresh_tree_pss`), and
   again once idle after `BURST_S` seconds of echo load at concurrency 32, as a
   server that has been used sits idle (`idle_tree_pss`: a JVM keeps the heap
   that load grew; `idle_roles_pss` splits it into server, factory and workers);
2. `echo` at 2 workers: the tree's PSS again; the difference is what one more
   worker costs -> `worker_pss`;
3. `mlp` registered `repeats` times with 1 worker, then with 2, each timed from
   the register call until every worker is READY and a prediction was answered,
   and unregistered: rows of `Memory.registers` (configs "memory/1w" and
   "memory/2w"), which run.py adds to the run's register rows;
4. `big` (200 MiB of float32 weights, each server's default BaseHandler loading)
   with 1 worker, then 4: the PSS of its workers (`weights_workers_pss`) and of
   the tree over the tree without it (`weights_tree_pss`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import loadgen
import psutil
import servers
import workloads

READY_LIMIT = 300.0  # seconds; only a guard against workers that never come up
BURST_S = 5.0  # seconds of echo load before the idle figure
POLL = 0.02  # seconds between describe calls while workers start
MIB = 1 << 20

Record = dict[str, Any]


def pss(pid: int) -> int:
    """The PSS of one process in bytes (its /proc/PID/smaps_rollup); 0 once it is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def tree_pss(pid: int) -> int:
    """The PSS of `pid` and all its descendants, in bytes."""
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    return pss(pid) + sum(pss(child.pid) for child in descendants)


def tree_roles(pid: int) -> dict[str, int]:
    """PSS in bytes of `pid` ("server"), of a jupyter_serve worker factory among its
    children ("factory") and of all other descendants ("workers")."""
    roles = {"server": pss(pid), "factory": 0, "workers": 0}
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                factory = child.ppid() == pid and servers.FACTORY in " ".join(child.cmdline())
                roles["factory" if factory else "workers"] += pss(child.pid)
    return roles


class Memory:
    """The memory steps on every server; `run()` returns {server name: record}."""

    def __init__(
        self,
        running: dict[str, servers.Server],
        loads: dict[str, dict[str, loadgen.Target]],
        repeats: int,
        first_prediction: Callable[[loadgen.Target], None],
        log: Callable[[str], None],
    ) -> None:
        self.running, self.loads, self.repeats = running, loads, repeats
        self.first_prediction, self.log = first_prediction, log
        self.records: dict[str, Record] = {name: {} for name in running}
        self.registers: list[Record] = []

    def run(self) -> dict[str, Record]:
        self.each(self.echo_workers)
        self.each(self.register_times)
        self.each(self.weights)
        return self.records

    def each(self, step: Callable[[str, servers.Server], None]) -> None:
        for name, server in self.running.items():
            step(name, server)

    def ready(self, name: str, model: str, workers: int, server: servers.Server) -> None:
        """Return once `model` has `workers` READY workers and answered a prediction."""
        began = time.perf_counter()
        while sum(status == "READY" for _, status in server.workers(model)) < workers:
            if time.perf_counter() - began > READY_LIMIT:
                raise RuntimeError(f"{name}: {model} never had {workers} READY workers")
            time.sleep(POLL)
        self.first_prediction(self.loads[name][model])

    def echo_workers(self, name: str, server: servers.Server) -> None:
        server.register("echo", 1, 5, 1)
        self.ready(name, "echo", 1, server)
        fresh = tree_pss(server.server_pid)
        asyncio.run(loadgen.closed_loop(self.loads[name]["echo"], 32, 10**7, BURST_S))
        one = tree_pss(server.server_pid)
        self.records[name]["idle_roles_pss"] = tree_roles(server.server_pid)
        server.scale("echo", 2)
        self.ready(name, "echo", 2, server)
        two = tree_pss(server.server_pid)
        server.unregister("echo")
        self.records[name].update(
            fresh_tree_pss=fresh, idle_tree_pss=one, echo_2w_tree_pss=two, worker_pss=two - one
        )
        self.log(f"{name}: tree PSS {fresh / MIB:.0f} MiB at 1 echo worker fresh, "
                 f"{one / MIB:.0f} after load, {two / MIB:.0f} at 2 workers")  # fmt: skip

    def register_times(self, name: str, server: servers.Server) -> None:
        for workers in (1, 2):
            for _ in range(self.repeats):
                began = time.perf_counter()
                register_s = server.register("mlp", 1, 5, workers)
                self.ready(name, "mlp", workers, server)
                ready_s = time.perf_counter() - began
                server.unregister("mlp")
                self.registers.append({
                    "server": name, "model": "mlp", "config": f"memory/{workers}w",
                    "register_s": round(register_s, 3), "ready_s": round(ready_s, 3),
                })  # fmt: skip
                self.log(f"{name}: mlp with {workers} worker(s) ready after {ready_s:.2f} s")

    def weights(self, name: str, server: servers.Server) -> None:
        big = workloads.BIG
        without = tree_pss(server.server_pid)
        figures: Record = {"tree_pss_without": without}
        server.register(big, 1, 5, 1)
        for workers in (1, 4):
            if workers > 1:
                server.scale(big, workers)
            self.ready(name, big, workers, server)
            pids = [pid for pid, _ in server.workers(big)]
            figures[f"{workers}w"] = {
                "workers_pss": sum(pss(pid) for pid in pids),
                "tree_pss": tree_pss(server.server_pid),
            }
        server.unregister(big)
        self.records[name]["weights"] = figures
        one, four = figures["1w"]["workers_pss"], figures["4w"]["workers_pss"]
        self.log(f"{name}: big's workers PSS {one / MIB:.0f} MiB at 1, {four / MIB:.0f} at 4")


def summary(records: dict[str, Record]) -> dict[str, Record]:
    """Per server: the figures the memory ratios divide, in MiB."""
    out: dict[str, Record] = {}
    for name, record in records.items():
        weights = record.get("weights", {})
        base = weights.get("tree_pss_without", 0)
        out[name] = {
            "fresh_tree_pss_mib": _mib(record.get("fresh_tree_pss")),
            "idle_tree_pss_mib": _mib(record.get("idle_tree_pss")),
            "worker_pss_mib": _mib(record.get("worker_pss")),
            "weights_workers_pss_mib": {
                w: _mib(weights.get(w, {}).get("workers_pss")) for w in ("1w", "4w")
            },
            "weights_tree_pss_over_no_model_mib": {
                w: _mib(weights[w]["tree_pss"] - base) if w in weights else None
                for w in ("1w", "4w")
            },
        }
    return out


def _mib(value: int | None) -> float | None:
    return None if value is None else round(value / MIB, 1)
