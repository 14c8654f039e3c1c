"""The LLM part's medians, ratios and markdown (bench/llm.py makes the record).

Ratios are jupyter_serve over transformers serve (or over in-process `generate()`), from
the medians of the repeats: for tokens/s higher is better, for latencies lower is better.
`llm_extra_worker_pss_mib` is a size, not a ratio: what one more LM worker costs the
machine. A ratio is null when either side is missing (`--no-transformers-serve`).
"""

from __future__ import annotations

import statistics
from typing import Any

JS, HF = "jupyter_serve", "transformers_serve"
MEDIANS = ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms",
           "tpot_p50_ms", "tokens_per_event", "load1")  # fmt: skip
SUMS = ("requests", "errors", "same_as_generate", "completion_tokens")

Record = dict[str, Any]


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def summarize(points: list[Record]) -> list[Record]:
    """One row per (server, concurrency): medians over the repeats, counts summed."""
    rows = []
    for server, concurrency in sorted({(p["server"], p["concurrency"]) for p in points}):
        repeats = [p for p in points if (p["server"], p["concurrency"]) == (server, concurrency)]
        row: Record = {"server": server, "concurrency": concurrency, "repeats": len(repeats)}
        row.update({key: _median([p[key] for p in repeats]) for key in MEDIANS})
        row.update({key: sum(p[key] for p in repeats) for key in SUMS})
        rows.append(row)
    return rows


def _value(part: Record, server: str, concurrency: int, key: str) -> Any:
    for row in part.get("summary", []):
        if (row["server"], row["concurrency"]) == (server, concurrency):
            return row[key]
    return None


def _ratio(top: Any, bottom: Any) -> float | None:
    return None if top is None or not bottom else round(float(top) / float(bottom), 3)


def inprocess_limit(part: Record) -> float | None:
    """In-process `generate()`'s tokens/s: the median of its turns beside the concurrency-1
    points (bench/llm.py), else the run before the servers started."""
    alongside = part.get("inprocess_alongside") or []
    if alongside:
        return _median(alongside)
    return (part.get("inprocess_generate") or {}).get("tokens_per_s")  # type: ignore[no-any-return]


def ratios(part: Record) -> dict[str, float | None]:
    """The LLM part's ratios (module docstring)."""
    generate = inprocess_limit(part)
    extra = ((part.get("memory") or {}).get(JS) or {}).get("extra_worker") or {}

    def versus(key: str, concurrency: int) -> float | None:
        return _ratio(_value(part, JS, concurrency, key), _value(part, HF, concurrency, key))

    return {
        "llm_tokens_c8_vs_transformers_serve": versus("tokens_per_s", 8),
        "llm_ttft_p50_c8_vs_transformers_serve": versus("ttft_p50_ms", 8),
        "llm_tokens_c1_vs_inprocess_generate": _ratio(
            _value(part, JS, 1, "tokens_per_s"), generate
        ),
        "llm_extra_worker_pss_mib": extra.get("extra_worker_pss_mib"),
        "llm_tokens_c1_vs_transformers_serve": versus("tokens_per_s", 1),
        "llm_tokens_c32_vs_transformers_serve": versus("tokens_per_s", 32),
        "llm_itl_p50_c8_vs_transformers_serve": versus("itl_p50_ms", 8),
        "llm_ttft_p50_c1_vs_transformers_serve": versus("ttft_p50_ms", 1),
        "transformers_serve_tokens_c1_vs_inprocess_generate": _ratio(
            _value(part, HF, 1, "tokens_per_s"), generate
        ),
    }


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if isinstance(value, float) else str(value)


def markdown_lines(part: Record) -> list[str]:
    """The LLM section: the points' table, then the model, the limit and the memory."""
    lines = ["| server | c | requests | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms "
             "| TPOT p50 ms | tokens/event | same as generate() | errors | load1 | tokens/s vs "
             "transformers serve |", "|---" * 13 + "|"]  # fmt: skip
    for row in part.get("summary", []):
        versus = _ratio(row["tokens_per_s"], _value(part, HF, row["concurrency"], "tokens_per_s"))
        shown = f"{versus:.3f}" if versus is not None and row["server"] == JS else None
        cells = [row["server"], row["concurrency"], row["requests"], row["tokens_per_s"],
                 row["ttft_p50_ms"], row["ttft_p99_ms"], row["itl_p50_ms"], row["tpot_p50_ms"],
                 row["tokens_per_event"], f"{row['same_as_generate']}/{row['requests']}",
                 row["errors"], row["load1"], shown]  # fmt: skip
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    if not part.get("summary"):
        return lines
    model, plan, generate = part["model"], part["plan"], part["inprocess_generate"]
    lines += [
        "",
        f"Model: {model['shape']}, {model['params']:,} parameters, trained "
        f"{model['train'].get('steps', 0)} steps (seed {model['seed']}; loss "
        f"{model['train'].get('loss', '-')}); {len(part['prompts'])} seeded chat prompts, "
        f"max_tokens {plan['max_tokens']}, temperature 0; requests per point "
        f"max({plan['min_requests']}, {plan['rounds']} x c), {plan['repeats']} repeat(s), "
        "medians shown.",
        f"In-process greedy `generate()`, one request at a time: {generate['tokens_per_s']} "
        f"tokens/s before the servers started, {part.get('inprocess_alongside') or '-'} in "
        f"its turns beside the concurrency-1 points, median {inprocess_limit(part)} (the "
        f"limit the ratio uses; {generate['torch_threads']} torch threads).",
    ]  # fmt: skip
    for name, record in part.get("memory", {}).items():
        lines.append(f"{name}: process tree PSS after the points {record['tree_pss_mib']} MiB.")
        extra = record.get("extra_worker")
        if extra:
            lines.append(f"{name}: one more LM worker adds {extra['extra_worker_pss_mib']} MiB "
                         f"PSS (tree {extra['tree_pss_1w_mib']} -> {extra['tree_pss_2w_mib']} "
                         f"MiB; each worker {extra['workers_pss_mib']} MiB).")  # fmt: skip
    return lines
