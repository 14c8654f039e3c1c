"""The benchmark's CI smoke checks: `bench/run.py --quick --no-torchserve`, `--memory
--no-torchserve`, `--stall`, `--hub --quick` and `--llm --quick --no-transformers-serve`,
and `bench/body_copies.py`, complete and report.

No thresholds: it checks that every jupyter_serve point ran with zero errors,
that the ratios the issues name are all present (TorchServe's null without it),
that the memory part measured every step, that the markdown report is written and
that nothing is left running. A small loopback server also checks the load
generator's HTTP parsing and error counts.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import hub_launcher  # noqa: E402
import loadgen  # noqa: E402

RATIOS = (
    "echo_c32_rps_vs_torchserve",
    "echo_c1_p50_vs_torchserve",
    "cnn_b8_vs_inprocess",
    "cnn_b8_rps_vs_torchserve",
    "register_ready_vs_torchserve",
    "register_ready_2w_vs_torchserve",
    "server_rss_vs_torchserve_jvm",
    "worker_pss_vs_torchserve",
    "weights_4w_vs_1w",
    "idle_server_pss_vs_torchserve",
    "cb_rps_vs_torchserve",
    "cb_first_chunk_p50_vs_torchserve",
    "cb_rps_vs_static_batching",
    "llm_tokens_c8_vs_transformers_serve",
    "llm_ttft_p50_c8_vs_transformers_serve",
    "llm_tokens_c1_vs_inprocess_generate",
    "llm_extra_worker_pss_mib",
)


def leftovers(folder: Path) -> list[int]:
    """Processes whose command line or working folder lies under `folder`."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "cwd"]):
        text = " ".join(process.info["cmdline"] or []) + " " + (process.info["cwd"] or "")
        if str(folder) in text and process.pid != os.getpid():
            found.append(process.pid)
    return found


def test_quick_run_without_torchserve_reports_every_point(tmp_path: Path) -> None:
    out = tmp_path / "tmp.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    argv = [sys.executable, str(BENCH / "run.py"), "--quick", "--no-torchserve", "--out", str(out)]
    subprocess.run(argv, check=True, env=env, cwd=tmp_path, capture_output=True, timeout=600)
    results = json.loads(out.read_text())
    seen = {(p["server"], p["model"], p["config"], p["concurrency"]) for p in results["points"]}
    for model in ("echo", "mlp", "cnn"):
        for config in ("batch1/1w", "batch8-5ms/1w", "batch8/2w"):
            for concurrency in (1, 32):
                assert ("jupyter_serve", model, config, concurrency) in seen
    assert all(p["errors"] == 0 and p["ok"] > 0 for p in results["points"])
    assert {p["server"] for p in results["points"]} == {"jupyter_serve", "tornado_ceiling"}
    ceiling = {
        (p["model"], p["config"]) for p in results["points"] if p["server"] != "jupyter_serve"
    }
    assert ceiling == {("echo", "batch8-5ms/1w")}  # the bare tornado echo joins one config
    ratios = results["ratios"]
    assert set(RATIOS) <= set(ratios)
    assert ratios["echo_c32_rps_vs_tornado_ceiling"] > 0
    assert ratios["echo_c32_rps_vs_torchserve"] is None
    assert ratios["cnn_b8_vs_inprocess"] > 0
    cnn_runs = results["inprocess"]["cnn"]
    assert cnn_runs["1 process, default threads, before serving"]["8"] > 0
    alongside = cnn_runs["1 process, default threads, alongside serving"]["8"]
    served = max(
        row["rps"]
        for row in results["summary"]
        if (row["server"], row["model"], row["concurrency"]) == ("jupyter_serve", "cnn", 32)
        and row["config"] in ("batch8-5ms/1w", "batch8/2w")
    )
    assert ratios["cnn_b8_vs_inprocess"] == round(served / alongside, 3)  # the idle-server limit
    assert results["cold_start"]["jupyter_serve"] > 0
    assert len(results["registers"]) == 9
    markdown = out.with_suffix(".md").read_text()
    assert "| cnn_b8_vs_inprocess |" in markdown
    assert "| echo | batch8/2w | 32 | jupyter_serve |" in markdown
    assert leftovers(tmp_path) == []


def test_continuous_part_streams_to_every_participant_and_reports(tmp_path: Path) -> None:
    """`--cb --quick`: Poisson load on continuous and static batching, every request of
    the continuous batch answered (no threshold on the figures)."""
    out = tmp_path / "cb.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    argv = [sys.executable, str(BENCH / "run.py"), "--cb", "--quick", "--no-torchserve",
            "--out", str(out)]  # fmt: skip
    subprocess.run(argv, check=True, env=env, cwd=tmp_path, capture_output=True, timeout=600)
    results = json.loads(out.read_text())
    part = results["continuous"]
    assert set(part) == {"rate", "seconds", "step_ms", "jupyter_serve_cb",
                         "jupyter_serve_static", "sweep"}  # fmt: skip
    cb = part["jupyter_serve_cb"]
    assert cb["errors"] == 0
    assert cb["ok"] == cb["sent"] > 0
    assert cb["first_chunk_p50_ms"] <= cb["latency_p50_ms"]
    assert [swept["step_ms"] for swept in part["sweep"]] == [2.0, 1.0]
    assert all(swept["jupyter_serve_cb"]["ok"] > 0 for swept in part["sweep"])
    assert isinstance(results["ratios"]["cb_rps_vs_static_batching"], float)
    assert results["ratios"]["cb_rps_vs_torchserve"] is None
    assert results["ratios"]["cb_rps_vs_torchserve_1ms"] is None
    markdown = out.with_suffix(".md").read_text()
    assert "| jupyter_serve_static (5 ms steps) |" in markdown
    assert "| jupyter_serve_cb (1 ms steps) |" in markdown
    assert leftovers(tmp_path) == []


def test_llm_part_streams_the_same_answers_as_generate_and_reports(tmp_path: Path) -> None:
    """`--llm --quick --no-transformers-serve`: the tiny LM streamed over the OpenAI API at
    each concurrency, every answer the in-process greedy one, a second worker measured (no
    threshold on the figures)."""
    out = tmp_path / "llm.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    argv = [sys.executable, str(BENCH / "run.py"), "--llm", "--quick", "--no-transformers-serve",
            "--out", str(out)]  # fmt: skip
    subprocess.run(argv, check=True, env=env, cwd=tmp_path, capture_output=True, timeout=600)
    results = json.loads(out.read_text())
    part = results["llm"]
    assert results["meta"]["mode"] == "llm"
    assert results["meta"]["llm_model"]["params"] > 0
    assert [(row["server"], row["concurrency"]) for row in part["summary"]] == [
        ("jupyter_serve", 1), ("jupyter_serve", 8)
    ]  # fmt: skip
    for point in part["points"]:
        assert point["errors"] == 0
        assert point["ok"] == point["requests"] > 0
        assert point["same_as_generate"] == point["requests"]  # temperature 0: greedy's answers
        assert point["completion_tokens"] > 0
        assert point["ttft_p50_ms"] <= point["ttft_p99_ms"]
    assert part["inprocess_generate"]["tokens_per_s"] > 0
    extra = part["memory"]["jupyter_serve"]["extra_worker"]
    assert len(extra["workers_pss_mib"]) == 2
    assert "transformers_serve" not in part["memory"]
    ratios = results["ratios"]
    assert set(RATIOS) <= set(ratios)
    assert ratios["llm_extra_worker_pss_mib"] == extra["extra_worker_pss_mib"]
    assert len(part["inprocess_alongside"]) == 1  # its turn beside the one repeat at c=1
    served_c1 = next(row for row in part["summary"] if row["concurrency"] == 1)["tokens_per_s"]
    assert ratios["llm_tokens_c1_vs_inprocess_generate"] == round(
        served_c1 / part["inprocess_alongside"][0], 3
    )
    assert ratios["llm_tokens_c8_vs_transformers_serve"] is None
    markdown = out.with_suffix(".md").read_text()
    assert "## Language model over the OpenAI streaming API" in markdown
    assert "| jupyter_serve | 8 |" in markdown
    assert leftovers(tmp_path) == []


def test_memory_run_without_torchserve_measures_every_step(tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    argv = [sys.executable, str(BENCH / "run.py"), "--memory", "--no-torchserve", "--repeats",
            "1", "--out", str(out)]  # fmt: skip
    subprocess.run(argv, check=True, env=env, cwd=tmp_path, capture_output=True, timeout=600)
    results = json.loads(out.read_text())
    record = results["memory"]["jupyter_serve"]
    assert 0 < record["worker_pss"] < record["echo_2w_tree_pss"]
    weights = record["weights"]
    assert 0 < weights["1w"]["workers_pss"] < weights["4w"]["workers_pss"]
    ratios = results["ratios"]
    assert set(RATIOS) <= set(ratios)
    assert ratios["weights_4w_vs_1w"] == round(
        weights["4w"]["workers_pss"] / weights["1w"]["workers_pss"], 3
    )
    assert ratios["worker_pss_vs_torchserve"] is None  # no TorchServe in this run
    configs = sorted(r["config"] for r in results["registers"])
    assert configs == ["memory/1w", "memory/2w"]
    assert results["points"] == []
    markdown = out.with_suffix(".md").read_text()
    assert "## Memory (PSS from /proc/PID/smaps_rollup, MiB)" in markdown
    assert "## Serving points" not in markdown
    assert leftovers(tmp_path) == []


def test_stall_probe_sends_every_case_to_both_servers_and_reports(tmp_path: Path) -> None:
    """Every worst case is answered by jupyter_serve with the answer issue 22 asks for
    (no threshold on the figures: those are the benchmark's, not the test's)."""
    out = tmp_path / "stall.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    argv = [sys.executable, str(BENCH / "run.py"), "--stall", "--out", str(out)]
    subprocess.run(argv, check=True, env=env, cwd=tmp_path, capture_output=True, timeout=600)
    results = json.loads(out.read_text())
    serve, bare = results["stall"]["jupyter_serve"], results["stall"]["jupyter_server"]
    answers = {case: record["answers"] for case, record in serve.items()}
    assert answers == {
        "v2_shape_amplification": [400], "v2_binary_bool_x6": [413], "v2_json_6mb": [200],
        "v1_instances_500k": [503], "v1_instances_6mb": [503], "worker_logs": [200],
        "bare_lf": [200],
    }  # fmt: skip
    assert set(bare) == set(serve)
    assert all(record["status_max_ms"] > 0 for record in (*serve.values(), *bare.values()))
    summary = results["stall_summary"]
    assert results["ratios"]["stall_ms_worst"] == max(summary["stall_ms"].values())
    assert "## Stall probe" in out.with_suffix(".md").read_text()
    assert leftovers(tmp_path) == []


def test_body_copies_measures_the_server_cpu_per_request_by_body_size(tmp_path: Path) -> None:
    """`bench/body_copies.py` (issue 25's copies): every size echoed intact, figures kept
    under the run's label beside earlier ones."""
    out = tmp_path / "copies.json"
    out.write_text(json.dumps({"before": {"points": []}}))
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    argv = [sys.executable, str(BENCH / "body_copies.py"), "--sizes", "1024,200000",
            "--seconds", "0.3", "--out", str(out), "--label", "after"]  # fmt: skip
    subprocess.run(argv, check=True, env=env, cwd=tmp_path, capture_output=True, timeout=600)
    results = json.loads(out.read_text())
    assert set(results) == {"before", "after"}
    points = results["after"]["points"]
    assert [point["bytes"] for point in points] == [1024, 200000]
    assert all(point["requests"] > 0 and point["server_cpu_us_per_req"] > 0 for point in points)
    assert isinstance(results["after"]["server_ns_per_kib"], float)
    assert leftovers(tmp_path) == []


HUB_MISSING = hub_launcher.available()


@pytest.mark.skipif(
    HUB_MISSING is not None and os.environ.get("CI") != "true",
    reason=f"a real JupyterHub is needed: {HUB_MISSING} (CI=true runs it anyway)",
)
def test_hub_run_measures_the_proxy_the_single_user_server_and_the_token_lane(
    tmp_path: Path,
) -> None:
    out = tmp_path / "hub.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    argv = [sys.executable, str(BENCH / "run.py"), "--hub", "--quick", "--out", str(out)]
    subprocess.run(argv, check=True, env=env, cwd=tmp_path, capture_output=True, timeout=600)
    results = json.loads(out.read_text())
    seen = {(p["server"], p["concurrency"]) for p in results["hub"]}
    servers = ("token_lane", "hub_proxy", "hub_direct")
    assert seen == {(server, c) for server in servers for c in (1, 32)}
    assert all(p["errors"] == 0 and p["ok"] > 0 and p["rps"] > 0 for p in results["hub"])
    ratios = results["ratios"]
    for name in ("hub_direct_rps_vs_token_lane", "hub_proxy_rps_vs_token_lane"):
        assert ratios[name] > 0
        assert ratios[f"{name}_c1"] > 0
    assert results["points"] == []
    markdown = out.with_suffix(".md").read_text()
    assert "## Under JupyterHub" in markdown
    assert "| echo | batch8-5ms/1w | 32 | hub_direct |" in markdown
    assert leftovers(tmp_path) == []


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve_and_load(handler: Handler, target_body: bytes, requests: int) -> loadgen.Tally:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    check = lambda status, body: status == 200 and body == target_body  # noqa: E731
    target = loadgen.Target(f"http://127.0.0.1:{port}/p", b"ping", check=check)
    async with server:
        return await loadgen.closed_loop(target, 2, requests, 30.0)


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    return await reader.readexactly(length)


def test_loadgen_reads_chunked_answers_and_counts_bad_bodies() -> None:
    answers = iter([b"good", b"bad!"] * 10)

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not reader.at_eof():
            try:
                assert await read_request(reader) == b"ping"
            except asyncio.IncompleteReadError:
                break
            body = next(answers)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            writer.write(b"2\r\n" + body[:2] + b"\r\n2\r\n" + body[2:] + b"\r\n0\r\n\r\n")
            await writer.drain()
        writer.close()

    tally = asyncio.run(serve_and_load(chunked, b"good", 20))
    summary = tally.summary()
    assert (summary["ok"], summary["errors"]) == (10, 10)
    assert "bad!" in str(summary["first_error"])


def test_loadgen_counts_error_statuses_and_stops_at_the_request_bound() -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not reader.at_eof():
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            writer.write(b"HTTP/1.1 503 No\r\nContent-Length: 2\r\n\r\nno")
            await writer.drain()
        writer.close()

    summary = asyncio.run(serve_and_load(refuse, b"", 7)).summary()
    assert (summary["requests"], summary["ok"], summary["errors"]) == (7, 0, 7)
    assert summary["p50_ms"] is None
