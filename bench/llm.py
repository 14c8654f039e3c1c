"""The LLM part: one language model folder on jupyter_serve and on `transformers serve`.

The model is made once per run (bench/llm_local.py, a child process): jupyter_serve's tiny
Llama (`SHAPE`, seed 0) trained for `TRAIN_STEPS` seeded steps, so it babbles Python's
documentation rather than noise. The same folder is archived for jupyter_serve (handler
`causal_lm`, the folder's files as extra files; registered with 1 worker and the
handler's defaults: continuous batching, batch size 32) and served as is by
`transformers serve --continuous-batching --device cpu` (bench/hf_serve.py).

Both get the same seeded chat prompts (`conversations`: snippets of Python's own
documentation), temperature 0 and the same `max_tokens`, closed loop at each concurrency
in `CONCURRENCIES` over the OpenAI streaming API (bench/llm_stream.py: output tokens/s,
time to first token p50/p99, inter-token latency p50), `rounds` requests per client,
repeated with the servers' order swapped; both servers run side by side, idle while the
other is measured. Every answer is compared with in-process greedy `generate()` on the
same folder at concurrency 1 (bench/llm_local.py, run before the servers start). Its
tokens/s is the in-process limit: measured again at each repeat of concurrency 1, in turn
with the servers (both idle meanwhile), since this shared machine's speed drifts over
minutes and a limit taken apart from the points it bounds would measure the drift. Then
the memory of one more LM worker: jupyter_serve's tree PSS (bench/memory.py) at 1 worker
and at 2, each worker having answered.

`ratios(part)`: `llm_tokens_c8_vs_transformers_serve`, `llm_ttft_p50_c8_vs_transformers_serve`,
`llm_tokens_c1_vs_inprocess_generate`, `llm_extra_worker_pss_mib` and a few more.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import hf_serve
import httpx
import llm_report
import llm_stream
import memory
import servers
from points import pinned

from jupyter_serve.archive import ArchiveSpec, build_mar

JS, HF = "jupyter_serve", "transformers_serve"
INPROCESS = "inprocess_generate"  # a turn of the concurrency-1 points, not a server
MODEL = "tinylm"
CONCURRENCIES = (1, 8, 32)
LOCAL = Path(__file__).resolve().parent / "llm_local.py"
MIB = 1 << 20

Log = Callable[[str], None]


@dataclass(frozen=True)
class LLMPlan:
    """The model's shape and how much each point asks."""

    shape: dict[str, int]
    train_steps: int
    max_tokens: int
    prompts: int
    concurrencies: tuple[int, ...]
    rounds: int  # requests per client and point (at least MIN_REQUESTS per point)
    min_requests: int
    repeats: int
    inprocess_seconds: float

    @classmethod
    def for_mode(cls, quick: bool) -> LLMPlan:
        if quick:  # TinyLMShape's defaults, untrained: a structure check
            return cls({}, 0, 8, 8, (1, 8), 1, 2, 1, 0.0)
        shape = {"vocab_size": 1024, "hidden_size": 256, "intermediate_size": 512, "layers": 4,
                 "heads": 4, "context": 512}  # fmt: skip
        # A point lasts seconds, not one: this machine's speed drifts within a second
        return cls(shape, 200, 64, 16, CONCURRENCIES, 6, 16, 3, 15.0)

    def requests(self, concurrency: int) -> int:
        return max(self.min_requests, self.rounds * concurrency)


def conversations(count: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """`count` one-message chats: seeded snippets (6 to 20 words) of Python's documentation."""
    from pydoc_data.topics import topics

    texts = [text.split() for _, text in sorted(topics.items())]
    chooser = random.Random(seed)
    chats = []
    for _ in range(count):
        words = chooser.choice([t for t in texts if len(t) > 40])
        start, length = chooser.randrange(len(words) - 20), chooser.randint(6, 20)
        chats.append([{"role": "user", "content": " ".join(words[start : start + length])}])
    return chats


def local(*args: str) -> dict[str, Any]:
    """bench/llm_local.py's JSON answer."""
    done = subprocess.run([sys.executable, str(LOCAL), *args], check=True, capture_output=True,
                          timeout=1800)  # fmt: skip
    answer: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return answer


def archive(folder: Path, store: Path) -> Path:
    """`folder` as tinylm.mar: handler causal_lm, the folder's files as extra files."""
    files = ",".join(sorted(str(p) for p in folder.iterdir() if p.is_file()))
    spec = ArchiveSpec(model_name=MODEL, version="1.0", handler="causal_lm", extra_files=files,
                       export_path=str(store), force=True)  # fmt: skip
    return build_mar(spec)


def register(server: servers.JupyterServe) -> float:
    """tinylm.mar with 1 worker and the handler's defaults; the seconds it took."""
    params = {"url": f"{MODEL}.mar", "initial_workers": 1, "synchronous": "true"}
    began = time.perf_counter()
    with httpx.Client(headers=server.headers, timeout=servers.START_LIMIT) as client:
        answer = client.post(server.management_url("models"), params=params)
    if answer.status_code != 200:
        raise RuntimeError(f"jupyter_serve register {MODEL}: {answer.text}")
    return time.perf_counter() - began


def run(work: Path, quick: bool, with_transformers: bool, log: Log) -> dict[str, Any]:
    """The whole part (module docstring); its record."""
    plan = LLMPlan.for_mode(quick)
    folder, store = work / MODEL, work / "store"
    store.mkdir(parents=True, exist_ok=True)
    made = local("make", str(folder), "--shape", json.dumps(plan.shape),
                 "--train-steps", str(plan.train_steps))  # fmt: skip
    chats = conversations(plan.prompts)
    (work / "prompts.json").write_text(json.dumps(chats))
    inprocess = local("generate", str(folder), "--prompts", str(work / "prompts.json"),
                      "--max-tokens", str(plan.max_tokens),
                      "--seconds", str(plan.inprocess_seconds))  # fmt: skip
    references = inprocess.pop("references")
    log(f"LLM: {made['params']:,} parameters; in-process generate {inprocess}")
    archive(folder, store)
    part: dict[str, Any] = {
        "model": {"shape": plan.shape or "TinyLMShape defaults", **made, "seed": 0},
        "plan": {k: v for k, v in asdict(plan).items() if k != "shape"}, "prompts": chats,
        "reference_tokens": [r["completion_tokens"] for r in references],
        "inprocess_generate": inprocess, "points": [],
    }  # fmt: skip
    js = servers.JupyterServe(work / "js", store)
    running: dict[str, tuple[servers.Server, llm_stream.Chat]] = {
        JS: (js, llm_stream.Chat(f"{js.base}serve/v1/chat/completions", MODEL,
                                 tuple(js.headers.items()))),
    }  # fmt: skip
    try:
        part["jupyter_serve_start_s"] = round(js.start(), 3)
        part["register_s"] = round(register(js), 3)
        if with_transformers:
            bin_dir = hf_serve.ensure_transformers_venv(work / "venv-hf.log")
            hf = hf_serve.TransformersServe(work / "hf", folder, bin_dir)
            running[HF] = (hf, llm_stream.Chat(hf.chat_url(), str(folder)))
            part["transformers_start_s"] = round(hf.start(), 3)
        for name, (_, chat) in running.items():  # the first answers pay for setting up
            warm = asyncio.run(llm_stream.closed_loop(chat, chats, 8, 8, plan.max_tokens))
            log(f"LLM warm-up, {name}: {llm_stream.summary(warm, references)}")
        alongside = partial(generate_alongside, folder, work / "prompts.json", plan)
        measure_points(part, running, plan, chats, references, log, alongside)
        part["memory"] = {name: tree(server) for name, (server, _) in running.items()}
        part["memory"][JS]["extra_worker"] = extra_worker(js, running[JS][1], chats, plan)
        log(f"LLM memory: {part['memory']}")
    finally:
        for server, _ in running.values():
            server.stop()
    part["summary"] = llm_report.summarize(part["points"])
    return part


def generate_alongside(folder: Path, prompts: Path, plan: LLMPlan) -> float:
    """In-process greedy `generate()`'s tokens/s now (bench/llm_local.py)."""
    measured = local("generate", str(folder), "--prompts", str(prompts),
                     "--max-tokens", str(plan.max_tokens),
                     "--seconds", str(plan.inprocess_seconds))  # fmt: skip
    return float(measured["tokens_per_s"])


def measure_points(part: dict[str, Any], running: dict[str, tuple[servers.Server, Any]],
                   plan: LLMPlan, chats: list[Any], references: list[Any], log: Log,
                   alongside: Callable[[], float]) -> None:  # fmt: skip
    """Every concurrency, every repeat, the participants' order swapped at each repeat; at
    concurrency 1 in-process `generate()` takes its turn too (`alongside`)."""
    part["inprocess_alongside"] = []
    for concurrency in plan.concurrencies:
        for repeat in range(plan.repeats):
            order = [*running, *([INPROCESS] if concurrency == 1 else [])]
            for name in order[repeat % len(order) :] + order[: repeat % len(order)]:
                if name == INPROCESS:
                    part["inprocess_alongside"].append(alongside())
                    log(f"LLM in-process generate(): {part['inprocess_alongside'][-1]} tokens/s")
                    continue
                requests = plan.requests(concurrency)
                loop = llm_stream.closed_loop(running[name][1], chats, concurrency, requests,
                                              plan.max_tokens)  # fmt: skip
                with pinned():
                    answers = asyncio.run(loop)
                point = {"server": name, "concurrency": concurrency, "repeat": repeat,
                         **llm_stream.summary(answers, references),
                         "load1": round(os.getloadavg()[0], 2)}  # fmt: skip
                part["points"].append(point)
                log(f"LLM {name} c{concurrency}: {point['tokens_per_s']} tokens/s, TTFT p50 "
                    f"{point['ttft_p50_ms']} ms, ITL p50 {point['itl_p50_ms']} ms, "
                    f"errors {point['errors']}, load1 {point['load1']}")  # fmt: skip


def tree(server: servers.Server) -> dict[str, Any]:
    """The server's whole process tree's PSS, in MiB, after the points."""
    return {"tree_pss_mib": round(memory.tree_pss(server.server_pid) / MIB, 1)}


def extra_worker(js: servers.JupyterServe, chat: llm_stream.Chat, chats: list[Any],
                 plan: LLMPlan) -> dict[str, Any]:  # fmt: skip
    """What a second LM worker adds to jupyter_serve's tree, each worker having answered."""
    one = memory.tree_pss(js.server_pid)
    js.scale(MODEL, 2)
    began = time.perf_counter()
    while sum(status == "READY" for _, status in js.workers(MODEL)) < 2:
        if time.perf_counter() - began > memory.READY_LIMIT:
            raise RuntimeError(f"jupyter_serve: {MODEL} never had 2 READY workers")
        time.sleep(memory.POLL)
    asyncio.run(llm_stream.closed_loop(chat, chats, 16, 16, plan.max_tokens))
    two = memory.tree_pss(js.server_pid)
    workers = [memory.pss(pid) for pid, _ in js.workers(MODEL)]
    return {
        "tree_pss_1w_mib": round(one / MIB, 1), "tree_pss_2w_mib": round(two / MIB, 1),
        "extra_worker_pss_mib": round((two - one) / MIB, 1),
        "workers_pss_mib": [round(w / MIB, 1) for w in workers],
    }  # fmt: skip
