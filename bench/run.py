"""Benchmark jupyter_serve against TorchServe 0.12 and the in-process limit, in one run.

    python bench/run.py [--quick|--memory|--stall|--hub|--cb|--llm] [--no-torchserve]
                        [--no-transformers-serve] [--no-omp1] [--soak] --out out.json

Builds echo / mlp / cnn `.mar` files once with jupyter_serve's archiver and
serves the SAME files from `jupyter serve` and from TorchServe 0.12.0 (its own
venv, bench/.venv-ts, created on first use). For each model and configuration
(batch1/1w, batch8-5ms/1w, batch8/2w) every server is registered (timed to the
first good prediction), warmed up, then measured at each concurrency (closed
loop; `--rate` adds an open-loop point), repeats interleaved server by server so
the machine's noise falls on both. A bare tornado echo (bench/ceiling.py, the
most any tornado frontend can serve here) joins echo's batch8-5ms/1w points.
Full mode also runs both servers with OMP_NUM_THREADS=1 ("+omp1") for the
2-worker configuration, then the memory part (bench/memory.py: PSS of each
server's process tree, one more worker, 200 MiB of weights at 1 and 4 workers,
register to ready with 1 and 2 workers), then the stall probe (bench/stall.py: the
longest wait of Jupyter's own `/api/status` while the serve routes take worst-case
requests, beside a bare Jupyter: `stall_ms_worst`), then the hub part (bench/hub.py: echo
predictions/s through a real JupyterHub's proxy and straight to its single-user server,
against the token fast path outside a hub), then the continuous-batching part
(bench/continuous.py: streamed answers under Poisson arrivals, continuous batching beside
TorchServe's and beside static batching), then the LLM part (bench/llm.py: one small
language model folder on jupyter_serve and on `transformers serve --continuous-batching`,
its own venv bench/.venv-hf, streamed over the OpenAI API at concurrency 1, 8 and 32,
beside in-process `generate()`, and what one more LM worker costs). The load generator
is pinned to the last core while it measures. Writes the JSON (every point, the medians
in `summary`, `ratios`) and a markdown report beside it (`.md`).
`--quick` (the CI smoke check) takes about two minutes without TorchServe and
skips the memory part, the stall probe, the hub part and the later parts; `--memory`
runs only the memory part (a few minutes), `--stall` only the stall probe (about a
minute, no TorchServe), `--hub` only the hub part (a minute or two, no TorchServe; needs jupyterhub
and configurable-http-proxy; with `--quick`, short points), `--cb` only the
continuous-batching part (about two minutes; with `--quick`, short points), `--llm` only
the LLM part (ten minutes or so; with `--quick`, an untrained tiny model, short answers and
concurrency 1 and 8: a structure check; `--no-transformers-serve` leaves its peer out).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import continuous
import hub
import hub_launcher
import llm
import loadgen
import memory
import report
import servers
import soak
import stall
import workloads
from options import CONFIGS, Plan, meta, parse_args
from points import first_prediction, measure, target

OMP1 = {"OMP_NUM_THREADS": "1"}
ALONGSIDE = report.ALONGSIDE
CEILING_CONFIG = "batch8-5ms/1w"  # the echo configuration the tornado ceiling is measured in


class Runner:
    """Runs every point of one benchmark and collects the results."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.plan = Plan.for_args(args)
        self.work = work
        self.store = work / "store"
        self.workloads = workloads.workloads()
        self.servers: dict[str, servers.Server] = {}
        self.ceiling: servers.BareTornado | None = None
        self.results: dict[str, Any] = {
            "meta": meta(args), "cold_start": {}, "idle_rss": {}, "baseline_rss": {},
            "registers": [], "points": [], "rss": [], "inprocess": {},
        }  # fmt: skip

    def log(self, message: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def run(self) -> dict[str, Any]:
        if self.args.memory:
            return self.run_memory()
        if self.args.stall:
            return self.run_stall()
        if self.args.hub:
            return self.run_hub()
        if self.args.cb:
            return self.run_continuous()
        if self.args.llm:
            return self.run_llm()
        models = workloads.MODELS if self.args.quick else (*workloads.MODELS, workloads.BIG)
        workloads.build_store(self.store, models)
        self.inprocess("before serving")
        try:
            self.baseline()
            self.start_servers()
            for model in self.args.models.split(","):
                for config in self.args.configs.split(","):
                    self.run_config(model, config)
                self.inprocess_alongside(model)
            if not self.args.quick:
                self.memory()
        finally:
            for server in [*self.servers.values(), *([self.ceiling] if self.ceiling else [])]:
                server.stop()
        self.inprocess("after serving")
        if not self.args.quick:
            self.stall()
            self.hub_part()
            self.continuous_part()
            self.llm_part()
        self.results["summary"] = report.summarize(self.results["points"])
        self.results["ratios"] = report.ratios(self.results)
        return self.results

    def run_memory(self) -> dict[str, Any]:
        """Only the memory part: both servers up side by side, then bench/memory.py's steps."""
        workloads.build_store(self.store, ("echo", "mlp", workloads.BIG))
        try:
            self.start_servers()
            self.memory()
        finally:
            for server in self.servers.values():
                server.stop()
        self.results["summary"] = []
        self.results["ratios"] = report.ratios(self.results)
        return self.results

    def run_stall(self) -> dict[str, Any]:
        """Only the stall probe (bench/stall.py): jupyter_serve and a bare Jupyter, in turn."""
        workloads.build_store(self.store, ("echo",))
        self.stall()
        self.results["summary"] = []
        self.results["ratios"] = report.ratios(self.results)
        return self.results

    def run_hub(self) -> dict[str, Any]:
        """Only the hub part (bench/hub.py)."""
        workloads.build_store(self.store, (hub.MODEL,))
        self.hub_part()
        self.results["summary"] = []
        self.results["ratios"] = report.ratios(self.results)
        return self.results

    def run_continuous(self) -> dict[str, Any]:
        """Only the continuous-batching part (bench/continuous.py)."""
        self.continuous_part()
        self.results["summary"] = []
        self.results["ratios"] = report.ratios(self.results)
        return self.results

    def run_llm(self) -> dict[str, Any]:
        """Only the LLM part (bench/llm.py)."""
        self.llm_part()
        self.results["summary"] = []
        self.results["ratios"] = report.ratios(self.results)
        return self.results

    def llm_part(self) -> None:
        part = llm.run(self.work / "llm", self.args.quick, self.args.transformers_serve, self.log)
        self.results["llm"] = part
        self.results["meta"]["llm_model"] = part["model"]

    def continuous_part(self) -> None:
        seconds = 3.0 if self.args.quick else 20.0
        part = continuous.run(self.work / "continuous", self.store, seconds,
                              self.args.torchserve, self.log)  # fmt: skip
        self.results["continuous"] = part

    def hub_part(self) -> None:
        missing = hub_launcher.available()
        if missing:
            self.log(f"no hub part: {missing}")
            self.results["hub_skipped"] = missing
            return

        def measure_point(server: servers.Server, load: loadgen.Target, concurrency: int,
                          seconds: float) -> dict[str, Any]:  # fmt: skip
            return measure(server, load, concurrency, seconds, self.plan)

        points = hub.run(self.work / "hub", self.store, self.plan, measure_point,
                         first_prediction, self.log)  # fmt: skip
        self.results["hub"] = points
        self.results["hub_summary"] = report.summarize(points)

    def stall(self) -> None:
        self.results["stall"] = stall.run(self.work, self.store, self.log)
        self.results["stall_summary"] = stall.summary(self.results["stall"])

    def memory(self) -> None:
        chosen = {n: s for n, s in self.servers.items() if n in (report.JS, report.TS)}
        models = ("echo", "mlp", workloads.BIG)
        loads = {n: {m: target(s, self.workloads[m]) for m in models} for n, s in chosen.items()}
        part = memory.Memory(chosen, loads, self.args.repeats, first_prediction, self.log)
        self.results["memory"] = part.run()
        self.results["memory_summary"] = memory.summary(self.results["memory"])
        self.results["registers"].extend(part.registers)

    def baseline(self) -> None:
        bare = servers.BareJupyter(self.work / "bare", self.store)
        try:
            bare.start()
            self.results["baseline_rss"]["jupyter_server"] = servers.process_rss(bare.server_pid)
        finally:
            bare.stop()

    def start_servers(self) -> None:
        kinds: list[tuple[str, dict[str, str]]] = [("", {})]
        if self.args.omp1:
            kinds.append(("+omp1", OMP1))
        for suffix, env in kinds:
            if self.args.torchserve:
                bin_dir = servers.ensure_torchserve_venv(self.work / "venv-ts.log")
                ts = servers.TorchServe(self.work / f"ts{suffix}", self.store, bin_dir, env)
                self._start(f"torchserve{suffix}", ts)
            js = servers.JupyterServe(self.work / f"js{suffix}", self.store, env)
            self._start(f"jupyter_serve{suffix}", js)
        if "echo" in self.args.models.split(",") and not self.args.memory:
            self.ceiling = servers.BareTornado(self.work / "ceiling", self.store)
            self.ceiling.start()

    def participants(self, model: str, config: str) -> dict[str, servers.Server]:
        """The servers of one model and configuration; the tornado ceiling joins echo's."""
        if config == "batch8/2w":
            chosen = dict(self.servers)
        else:
            chosen = {n: s for n, s in self.servers.items() if not n.endswith("+omp1")}
        if model == "echo" and config == CEILING_CONFIG and self.ceiling is not None:
            chosen[report.CEILING] = self.ceiling
        return chosen

    def _start(self, name: str, server: servers.Server) -> None:
        self.servers[name] = server
        seconds = server.start()
        self.results["cold_start"][name] = round(seconds, 3)
        self.results["idle_rss"][name] = servers.process_rss(server.server_pid)
        self.log(f"{name} healthy after {seconds:.2f} s")

    def run_config(self, model: str, config: str) -> None:
        chosen = self.participants(model, config)
        loads = {name: target(s, self.workloads[model]) for name, s in chosen.items()}
        for name, server in chosen.items():
            if name != report.CEILING:  # nothing to register there
                self.register(name, server, loads[name], model, config)
        for name, server in chosen.items():
            measure(server, loads[name], 8, self.plan.warm_seconds, self.plan)
        seconds = self.plan.cnn_seconds if model == "cnn" else self.plan.seconds
        for concurrency in self.plan.concurrencies:
            for repeat in range(self.plan.repeats):
                order = list(chosen.items())
                order = order[repeat % len(order) :] + order[: repeat % len(order)]
                for name, server in order:
                    self.point(name, server, loads[name], model, config, concurrency, seconds)
        if self.args.rate and model == "echo":
            for name, server in chosen.items():
                self.point(name, server, loads[name], model, config, 32, seconds, self.args.rate)
        for name, server in chosen.items():
            usage = server.rss()
            self.results["rss"].append({
                "server": name, "model": model, "config": config,
                "server_rss": usage["server"], "worker_rss": usage["workers"],
                "factory_rss": usage.get("factory", []),
            })  # fmt: skip
            server.unregister(model)

    def register(self, name: str, server: servers.Server, load: loadgen.Target,
                 model: str, config: str) -> None:  # fmt: skip
        batch, delay, workers = CONFIGS[config]
        began = time.perf_counter()
        register_s = server.register(model, batch, delay, workers)
        first_prediction(load)
        ready = time.perf_counter() - began
        self.results["registers"].append({
            "server": name, "model": model, "config": config,
            "register_s": round(register_s, 3), "ready_s": round(ready, 3),
        })  # fmt: skip
        self.log(f"{name}: {model} {config} ready after {ready:.2f} s")

    def point(self, name: str, server: servers.Server, load: loadgen.Target, model: str,
              config: str, concurrency: int, seconds: float,
              rate: float | None = None) -> None:  # fmt: skip
        point = measure(server, load, concurrency, seconds, self.plan, rate)
        labels = {"server": name, "model": model, "config": config, "concurrency": concurrency}
        if rate:
            labels["open_loop_rate"] = str(rate)
        self.results["points"].append({**labels, **point})
        self.log(f"{name} {model} {config} c{concurrency}: {point['rps']} req/s, "
                 f"p50 {point['p50_ms']} ms, errors {point['errors']}")  # fmt: skip

    def inprocess(self, when: str) -> None:
        """The limit, taken before and after the serving points (the best one counts)."""
        if self.args.quick and when == "after serving":
            return
        for model in ("mlp", "cnn"):
            batches = self.plan.cnn_batches if model == "cnn" else "1,8,32"
            runs = self.results["inprocess"].setdefault(model, {})
            runs[f"1 process, default threads, {when}"] = inprocess_run(
                model, batches, 0, 1, self.plan
            )
            if not self.args.quick:
                runs[f"2 processes x 1 thread, {when}"] = inprocess_run(
                    model, batches, 1, 2, self.plan
                )
            self.log(f"in-process {model} {when}: {runs}")

    def inprocess_alongside(self, model: str) -> None:
        """The limit again while the servers are up and idle, as the serving points saw the
        machine (the JVMs' background threads included), repeated like a point: the median
        of the repeats per run kind is what `cnn_b8_vs_inprocess` divides by."""
        if model not in ("mlp", "cnn"):
            return
        batches = self.plan.cnn_batches if model == "cnn" else "1,8,32"
        kinds = [("1 process, default threads", 0, 1)]
        if not self.args.quick:
            kinds.append(("2 processes x 1 thread", 1, 2))
        runs = self.results["inprocess"].setdefault(model, {})
        for label, threads, processes in kinds:
            repeats = [inprocess_run(model, batches, threads, processes, self.plan)
                       for _ in range(self.plan.repeats)]  # fmt: skip
            runs[f"{label}, {ALONGSIDE}"] = {
                batch: report.median([r[batch] for r in repeats]) for batch in repeats[0]
            }
            self.log(f"in-process {model} {label} alongside serving: {repeats}")


def inprocess_run(model: str, batches: str, threads: int, processes: int,
                  plan: Plan) -> dict[str, float]:  # fmt: skip
    """Samples/s at each batch, summed over `processes` concurrent copies."""
    script = Path(__file__).resolve().parent / "inprocess.py"
    argv = [sys.executable, str(script), "--model", model, "--batches", batches,
            "--threads", str(threads), "--seconds", str(plan.inprocess_seconds)]  # fmt: skip
    children = [subprocess.Popen(argv, stdout=subprocess.PIPE) for _ in range(processes)]
    total: dict[str, float] = {}
    for child in children:
        out, _ = child.communicate(timeout=600)
        for batch, rate in json.loads(out)["samples_per_s"].items():
            total[batch] = round(total.get(batch, 0.0) + rate, 1)
    return total


def main() -> None:
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="jupyter_serve_bench_"))
    try:
        results = Runner(args, work).run()
        if args.soak:
            results["soak"] = soak.soak(work / "soak", args)
    finally:
        if args.keep:
            print(f"work folder kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    out = Path(args.out)
    out.write_text(json.dumps(results, indent=1) + "\n")
    text = report.markdown(results)
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
