"""Pure HTML for the dashboard: banner, model header, worker table and live figures.

Each function maps plain snapshot data to an HTML string; `dashboard` puts the
strings into stock `ipywidgets.HTML` children. Keeping this free of widgets lets
the tests read exactly what a user sees.
"""

from __future__ import annotations

import html
from collections import Counter

from jupyter_serve.kernel.widgets.plots import sparkline_svg
from jupyter_serve.kernel.widgets.snapshot import DashboardSnapshot, ModelView, Trend, WorkerView

__all__ = [
    "LOADING",
    "UNREACHABLE",
    "banner_html",
    "header_html",
    "state_html",
    "stats_html",
    "workers_html",
]

LOADING = "loading…"
UNREACHABLE = "server unreachable"
_CELL = 'style="padding:1px 8px;text-align:left"'
SPARK_WIDTH = 220
OWN_MEMORY = (
    "The worker's own memory: its private pages plus its share of the pages it shares "
    "with the worker factory and the other workers (torch, mapped weights), as the "
    "JupyterLab panel shows it (PSS). Hover a value for its resident size (RSS), which "
    "counts the shared pages in full."
)


def banner_html(snapshot: DashboardSnapshot) -> str:
    """The line above the models: unreachable state, or counts of models and answers."""
    if snapshot.unreachable is not None:
        reason = html.escape(snapshot.unreachable)
        return (
            f'<div class="jupyter-serve-unreachable" style="color:#b00020">'
            f"<b>{UNREACHABLE}:</b> {reason} (retrying; figures below are the last seen)</div>"
        )
    answers = " · ".join(f"{kind} {count}" for kind, count in sorted(snapshot.responses.items()))
    count = len(snapshot.models)
    models = f"{count} model version{'s' if count != 1 else ''}"
    return f'<div class="jupyter-serve-banner">{models}{" · " + answers if answers else ""}</div>'


def header_html(model: ModelView) -> str:
    """Name, version, health, batch size and worker bounds."""
    return (
        f'<div class="jupyter-serve-model"><b>{html.escape(model.name)}</b> '
        f"version {html.escape(model.version)}{' (default)' if model.is_default else ''} · "
        f"{html.escape(model.status or '?')} · "
        f"batch size {model.batch_size} · workers {model.min_workers} to {model.max_workers}</div>"
    )


def state_html(model: ModelView) -> str:
    """A load failure's text, "loading…" with the worker states, or nothing when serving."""
    if model.error is not None:
        return (
            '<div class="jupyter-serve-error" style="color:#b00020"><b>load failed</b>'
            f'<pre style="white-space:pre-wrap">{html.escape(model.error)}</pre></div>'
        )
    if not model.loading:
        return ""
    states = Counter(worker.status or "?" for worker in model.workers)
    ready = states.get("READY", 0)
    detail = ", ".join(f"{count} {state}" for state, count in sorted(states.items()))
    waiting = f"{ready}/{max(model.min_workers, len(model.workers))} workers ready"
    extra = f" ({html.escape(detail)})" if detail else " (starting workers)"
    return f'<div class="jupyter-serve-loading"><i>{LOADING}</i> {waiting}{extra}</div>'


def workers_html(model: ModelView) -> str:
    """A table of the workers: id, state, pid, device, memory, GPU use."""
    if not model.workers:
        return '<div class="jupyter-serve-workers"><i>no workers</i></div>'
    head = "".join(
        f"<th {_CELL}{_tip(name)}>{name}</th>"
        for name in ("worker", "state", "pid", "device", "memory", "GPU use")
    )
    rows = "".join(_worker_row(worker) for worker in model.workers)
    return f'<table class="jupyter-serve-workers"><tr>{head}</tr>{rows}</table>'


def _worker_row(worker: WorkerView) -> str:
    pid = worker.pid if worker.pid >= 0 else "—"
    cells = (worker.id, worker.status, pid, worker.device)
    plain = "".join(f"<td {_CELL}>{html.escape(str(cell))}</td>" for cell in cells)
    gpu = html.escape(worker.gpu_usage or "—")
    return f"<tr>{plain}{_memory_cell(worker)}<td {_CELL}>{gpu}</td></tr>"


def _memory_cell(worker: WorkerView) -> str:
    """The worker's own memory (PSS) with its resident size on hover; RSS alone when the
    server does not say (TorchServe)."""
    if worker.own_memory_bytes <= 0:
        return f'<td {_CELL} title="resident size (RSS)">{_mib(worker.memory_bytes)}</td>'
    rss = html.escape(f"resident size (RSS): {_mib(worker.memory_bytes)}")
    return f'<td {_CELL} title="{rss}">{_mib(worker.own_memory_bytes)}</td>'


def _tip(column: str) -> str:
    return f' title="{html.escape(OWN_MEMORY)}"' if column == "memory" else ""


def stats_html(model: ModelView, trend: Trend) -> str:
    """Queue depth, throughput, latency p50/p99, batch fill and two sparklines."""
    figures = (
        ("queue", f"{model.pending} pending"),
        ("throughput", _number(trend.throughput_rps, "req/s", 2)),
        ("p50", _number(trend.p50_ms, "ms", 1)),
        ("p99", _number(trend.p99_ms, "ms", 1)),
        ("batch fill", _percent(trend.batch_fill)),
    )
    cells = " · ".join(f"{name} <b>{value}</b>" for name, value in figures)
    plots = sparkline_svg(
        trend.throughput_history, width=SPARK_WIDTH, title="throughput", unit="req/s", digits=2
    ) + sparkline_svg(trend.latency_history, width=SPARK_WIDTH, title="p50", unit="ms")
    return f'<div class="jupyter-serve-stats">{cells}</div><div>{plots}</div>'


def _number(value: float | None, unit: str, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f} {unit}"


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB" if size > 0 else "—"
