"""Turn the runner's raw records into medians, the `ratios` object and a markdown report.

Every ratio is jupyter_serve / TorchServe (or served / in-process), taken from
medians of repeats measured back to back; a ratio is null when either side is
missing (e.g. `--no-torchserve`). For latency and memory ratios lower is better,
for throughput ratios higher is better.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

import continuous
import llm_report

JS, TS = "jupyter_serve", "torchserve"
CEILING = "tornado_ceiling"  # bench/ceiling.py: bare tornado echo, no model
BATCH8 = ("batch8-5ms/1w", "batch8/2w")
MIB = 1 << 20
ALONGSIDE = "alongside serving"  # in-process runs taken while the servers are up, idle

Record = dict[str, Any]


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def summarize(points: list[Record]) -> list[Record]:
    """One row per (server, model, config, concurrency): medians over the repeats."""
    groups: dict[tuple[str, str, str, int], list[Record]] = defaultdict(list)
    for point in points:
        groups[point["server"], point["model"], point["config"], point["concurrency"]].append(point)
    rows = []
    for (server, model, config, concurrency), repeats in groups.items():
        row: Record = {"server": server, "model": model, "config": config}
        row["concurrency"] = concurrency
        for key in ("rps", "p50_ms", "p90_ms", "p99_ms", "load1", "cpu_percent", "cpu_ms_per_req"):
            row[key] = median([r.get(key) for r in repeats])
        row["errors"] = sum(r["errors"] for r in repeats)
        row["repeats"] = len(repeats)
        rows.append(row)
    return rows


def _lookup(rows: list[Record], server: str, model: str, config: str, conc: int) -> Record | None:
    for row in rows:
        if (row["server"], row["model"], row["config"], row["concurrency"]) == (
            server, model, config, conc
        ):  # fmt: skip
            return row
    return None


def _ratio(top: float | None, bottom: float | None) -> float | None:
    if top is None or not bottom:
        return None
    return round(top / bottom, 3)


def _value(rows: list[Record], server: str, model: str, config: str, conc: int, key: str) -> Any:
    row = _lookup(rows, server, model, config, conc)
    return None if row is None else row[key]


def _best_rps(rows: list[Record], servers: tuple[str, ...], model: str) -> float | None:
    """The best c32 throughput over the batch-8 configurations and the given servers."""
    found = [
        r["rps"]
        for r in rows
        if r["server"] in servers and r["model"] == model and r["config"] in BATCH8
        if r["concurrency"] == 32 and r["rps"] is not None
    ]
    return max(found) if found else None


def _inprocess_best(inprocess: Record, model: str, batch: str,
                    only: str | None = None) -> float | None:  # fmt: skip
    """The best in-process rate at `batch` over the run kinds (those labelled `only`)."""
    runs = inprocess.get(model, {})
    rates = [run.get(batch) for label, run in runs.items() if only is None or only in label]
    present = [r for r in rates if r is not None]
    return max(present) if present else None


def _inprocess_limit(inprocess: Record, model: str, batch: str) -> float | None:
    """The limit served rates are held to: the best kind's median alongside serving (the
    machine as the serving points saw it), else the best single run."""
    alongside = _inprocess_best(inprocess, model, batch, only=ALONGSIDE)
    return alongside if alongside is not None else _inprocess_best(inprocess, model, batch)


def _registermedian(
    registers: list[Record], server: str, model: str, workers: str = "1w"
) -> float | None:
    """The median register-to-ready time of `model` over the configurations with `workers`."""
    chosen = [
        r for r in registers
        if (r["server"], r["model"]) == (server, model) and r["config"].endswith(workers)
    ]  # fmt: skip
    return median([r["ready_s"] for r in chosen])


def _rss_max(rss: list[Record], server: str) -> int | None:
    """The largest RSS of `server`'s serving processes but its workers: the server process
    and, for jupyter_serve, its worker factory (a JVM's counterpart: what serves, not what
    runs the models)."""
    values = [
        r["server_rss"] + sum(r.get("factory_rss") or []) for r in rss if r["server"] == server
    ]
    return max(values) if values else None


def ratios(results: Record) -> dict[str, float | None]:
    rows, inprocess = results["summary"], results["inprocess"]
    omp = (f"{JS}+omp1", f"{TS}+omp1")
    js_rss, ts_rss = _rss_max(results["rss"], JS), _rss_max(results["rss"], TS)
    baseline = results.get("baseline_rss", {}).get("jupyter_server")
    added = None if js_rss is None or baseline is None else js_rss - baseline
    registers = results["registers"]
    echo_c32 = {server: _value(rows, server, "echo", "batch8-5ms/1w", 32, "rps")
                for server in (JS, TS, CEILING)}  # fmt: skip
    return {
        "echo_c32_rps_vs_torchserve": _ratio(echo_c32[JS], echo_c32[TS]),
        "echo_c32_rps_vs_tornado_ceiling": _ratio(echo_c32[JS], echo_c32[CEILING]),
        "torchserve_echo_c32_rps_vs_tornado_ceiling": _ratio(echo_c32[TS], echo_c32[CEILING]),
        "echo_c1_p50_vs_torchserve": _ratio(
            _value(rows, JS, "echo", "batch8-5ms/1w", 1, "p50_ms"),
            _value(rows, TS, "echo", "batch8-5ms/1w", 1, "p50_ms"),
        ),
        "echo_c1_p50_vs_torchserve_batch1": _ratio(
            _value(rows, JS, "echo", "batch1/1w", 1, "p50_ms"),
            _value(rows, TS, "echo", "batch1/1w", 1, "p50_ms"),
        ),
        "cnn_b8_vs_inprocess": _ratio(
            _best_rps(rows, (JS, omp[0]), "cnn"), _inprocess_limit(inprocess, "cnn", "8")
        ),
        "cnn_b8_vs_inprocess_best_single_run": _ratio(
            _best_rps(rows, (JS, omp[0]), "cnn"), _inprocess_best(inprocess, "cnn", "8")
        ),
        "cnn_b8_rps_vs_torchserve": _ratio(
            _best_rps(rows, (JS,), "cnn"), _best_rps(rows, (TS,), "cnn")
        ),
        "cnn_b8_rps_vs_torchserve_best_threads": _ratio(
            _best_rps(rows, (JS, omp[0]), "cnn"), _best_rps(rows, (TS, omp[1]), "cnn")
        ),
        "mlp_b8_rps_vs_torchserve": _ratio(
            _best_rps(rows, (JS,), "mlp"), _best_rps(rows, (TS,), "mlp")
        ),
        "register_ready_vs_torchserve": _ratio(
            _registermedian(registers, JS, "mlp"), _registermedian(registers, TS, "mlp")
        ),
        "register_ready_2w_vs_torchserve": _ratio(
            _registermedian(registers, JS, "mlp", "2w"), _registermedian(registers, TS, "mlp", "2w")
        ),
        "register_ready_echo_vs_torchserve": _ratio(
            _registermedian(registers, JS, "echo"), _registermedian(registers, TS, "echo")
        ),
        "cold_start_vs_torchserve": _ratio(
            results["cold_start"].get(JS), results["cold_start"].get(TS)
        ),
        "server_rss_vs_torchserve_jvm": _ratio(added, ts_rss),
        "server_rss_total_vs_torchserve_jvm": _ratio(js_rss, ts_rss),
        **memory_ratios(results.get("memory", {})),
        "stall_ms_worst": results.get("stall_summary", {}).get("stall_ms_worst"),
        **hub_ratios(results.get("hub_summary", [])),
        **continuous.ratios(results.get("continuous", {})),
        **llm_report.ratios(results.get("llm", {})),
    }


def hub_ratios(rows: list[Record]) -> dict[str, float | None]:
    """The hub part's (bench/hub.py): echo req/s under the hub over the token fast path."""

    def rps(server: str, concurrency: int) -> Any:
        return _value(rows, server, "echo", "batch8-5ms/1w", concurrency, "rps")

    return {
        f"hub_{way}_rps_vs_token_lane{suffix}": _ratio(rps(f"hub_{way}", c), rps("token_lane", c))
        for way in ("direct", "proxy")
        for c, suffix in ((32, ""), (1, "_c1"))
    }


def memory_ratios(memory: Record) -> dict[str, float | None]:
    """The memory part's ratios (bench/memory.py's records of each server)."""
    js, ts = memory.get(JS, {}), memory.get(TS, {})

    def weights(record: Record, kind: str) -> float | None:
        figures = record.get("weights", {})
        if "1w" not in figures:
            return None
        base = 0 if kind == "workers_pss" else figures["tree_pss_without"]
        return _ratio(figures["4w"][kind] - base, figures["1w"][kind] - base)

    return {
        "worker_pss_vs_torchserve": _ratio(js.get("worker_pss"), ts.get("worker_pss")),
        "weights_4w_vs_1w": weights(js, "workers_pss"),
        "weights_4w_vs_1w_tree": weights(js, "tree_pss"),
        "torchserve_weights_4w_vs_1w": weights(ts, "workers_pss"),
        "idle_server_pss_vs_torchserve": _ratio(js.get("idle_tree_pss"), ts.get("idle_tree_pss")),
        "fresh_server_pss_vs_torchserve": _ratio(
            js.get("fresh_tree_pss"), ts.get("fresh_tree_pss")
        ),
    }


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _points_table(rows: list[Record]) -> list[str]:
    lines = [
        "| model | config | c | server | req/s | p50 ms | p90 ms | p99 ms | errors "
        "| CPU ms/req | load1 | rps vs TS | p50 vs TS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["model"], r["config"], r["concurrency"], r["server"])):
        peer = r["server"].replace(JS, TS) if r["server"].startswith(JS) else None
        other = _lookup(rows, peer, r["model"], r["config"], r["concurrency"]) if peer else None
        vs_rps = _ratio(r["rps"], other["rps"]) if other else None
        vs_p50 = _ratio(r["p50_ms"], other["p50_ms"]) if other else None
        cells = [
            r["model"], r["config"], r["concurrency"], r["server"], _fmt(r["rps"]),
            _fmt(r["p50_ms"], 2), _fmt(r["p90_ms"], 2), _fmt(r["p99_ms"], 2), r["errors"],
            _fmt(r["cpu_ms_per_req"], 2), _fmt(r["load1"], 2), _fmt(vs_rps, 2), _fmt(vs_p50, 2),
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def _startup_lines(results: Record) -> list[str]:
    lines = ["| server | start to healthy s | idle server RSS MiB | peak server RSS MiB |"]
    lines.append("|---|---|---|---|")
    for server, seconds in sorted(results["cold_start"].items()):
        idle = results["idle_rss"].get(server)
        peak = _rss_max(results["rss"], server)
        cells = [server, _fmt(seconds, 2), _fmt(idle and idle / MIB), _fmt(peak and peak / MIB)]
        lines.append("| " + " | ".join(cells) + " |")
    baseline = results.get("baseline_rss", {}).get("jupyter_server")
    if baseline:
        note = f"Bare jupyter_server (jupyter_serve disabled), idle: {baseline / MIB:.0f} MiB."
        lines.append("\n" + note)
    return lines


def _register_lines(results: Record) -> list[str]:
    lines = ["| server | model | config | register s | register to first prediction s |"]
    lines.append("|---|---|---|---|---|")
    for r in results["registers"]:
        cells = [r["server"], r["model"], r["config"], _fmt(r["register_s"], 2)]
        lines.append("| " + " | ".join([*cells, _fmt(r["ready_s"], 2)]) + " |")
    return lines


def _worker_lines(results: Record) -> list[str]:
    lines = ["| server | model | config | server RSS MiB | worker RSS MiB |"]
    lines.append("|---|---|---|---|---|")
    for r in results["rss"]:
        workers = ", ".join(f"{w / MIB:.0f}" for w in r["worker_rss"]) or "-"
        cells = [r["server"], r["model"], r["config"], f"{r['server_rss'] / MIB:.0f}", workers]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _inprocess_lines(results: Record) -> list[str]:
    lines = ["| model | run | batch 1 | batch 8 | batch 32 |", "|---|---|---|---|---|"]
    for model, runs in results["inprocess"].items():
        for run, rates in runs.items():
            cells = [model, run, *(_fmt(rates.get(b)) for b in ("1", "8", "32"))]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def _memory_lines(results: Record) -> list[str]:
    lines = [
        "| server | tree, 1 echo worker: fresh / idle after load | one more echo worker "
        "| big: workers' PSS 1w / 4w | big: tree over no model 1w / 4w |",
        "|---|---|---|---|---|",
    ]
    for server, row in results.get("memory_summary", {}).items():
        workers, tree = row["weights_workers_pss_mib"], row["weights_tree_pss_over_no_model_mib"]
        cells = [
            server, f"{_fmt(row['fresh_tree_pss_mib'])} / {_fmt(row['idle_tree_pss_mib'])}",
            _fmt(row["worker_pss_mib"]),
            f"{_fmt(workers['1w'])} / {_fmt(workers['4w'])}",
            f"{_fmt(tree['1w'])} / {_fmt(tree['4w'])}",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _stall_lines(results: Record) -> list[str]:
    """Each stall-probe case: the longest /api/status answer on each server, and the answers."""
    probe = results.get("stall", {})
    serve, bare = probe.get(JS, {}), probe.get("jupyter_server", {})
    lines = ["| case | jupyter_serve | bare Jupyter | added | jupyter_serve's answers |",
             "|---|---|---|---|---|"]  # fmt: skip
    added = results.get("stall_summary", {}).get("stall_ms", {})
    for name, case in serve.items():
        floor = bare.get(name, {}).get("status_max_ms")
        answers = ", ".join(str(a) for a in case["answers"])
        lines.append(f"| {name} | {_fmt(case['status_max_ms'])} | {_fmt(floor)} | "
                     f"{_fmt(added.get(name))} | {answers} |")  # fmt: skip
    return lines


def _continuous_lines(points: Record) -> list[str]:
    lines = ["| server | rate | req/s | first chunk p50 | p99 | end p50 | p99 | errors |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for at in (points, *points.get("sweep", [])):
        step = f" ({at['step_ms']:g} ms steps)" if "step_ms" in at else ""
        for name in (continuous.JS_CB, continuous.TS_CB, continuous.JS_STATIC):
            point = at.get(name)
            if point:
                lines.append(f"| {name}{step} | {at['rate']} | {point['rps']} | "
                             f"{point['first_chunk_p50_ms']} | {point['first_chunk_p99_ms']} | "
                             f"{point['latency_p50_ms']} | {point['latency_p99_ms']} | "
                             f"{point['errors']} |")  # fmt: skip
    return lines


def markdown(results: Record) -> str:
    meta = results["meta"]
    sections = [
        ("Ratios", ["| ratio | value |", "|---|---|",
                    *(f"| {k} | {_fmt(v, 3)} |" for k, v in results["ratios"].items()
                      if v is not None)]),
        ("Serving points (medians of repeats)", _points_table(results["summary"])),
        ("Cold start and server memory", _startup_lines(results)),
        ("Register to ready (first good prediction)", _register_lines(results)),
        ("Memory (PSS from /proc/PID/smaps_rollup, MiB)", _memory_lines(results)),
        ("RSS after each configuration's load", _worker_lines(results)),
        ("In-process forward (samples/s, the limit)", _inprocess_lines(results)),
        ("Stall probe (longest Jupyter /api/status answer per case, ms)", _stall_lines(results)),
        ("Under JupyterHub (echo; token_lane: the fast path outside a hub; hub_proxy: through "
         "configurable-http-proxy; hub_direct: the single-user server's own port)",
         _points_table(results.get("hub_summary", []))),
        ("Continuous batching (Poisson arrivals; ms from each request's scheduled start)",
         _continuous_lines(results.get("continuous", {}))),
        ("Language model over the OpenAI streaming API (closed loop; bench/llm.py)",
         llm_report.markdown_lines(results.get("llm", {}))),
    ]  # fmt: skip
    parts = [f"# jupyter_serve vs TorchServe 0.12: {meta['date']} ({meta['mode']})",
             f"\nMachine: {meta['machine']}"]  # fmt: skip
    for title, lines in sections:
        if len(lines) > 2:  # more than a table's header: something was measured
            parts += [f"\n## {title}\n", *lines]
    return "\n".join(parts) + "\n"
