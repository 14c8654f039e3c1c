"""A tiny reader of the Prometheus text exposition format (0.0.4), enough for `/metrics`.

The dashboard reads TorchServe's counters (`ts_inference_requests_total`,
`ts_inference_latency_microseconds`, `Requests2XX`...) from the text that both
TorchServe and jupyter_serve answer. Comments, `# HELP`/`# TYPE` lines and
timestamps are skipped; a line that does not parse is ignored rather than raised,
since one odd handler metric must not blank the dashboard. Standard library only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

__all__ = ["Sample", "parse_text", "sum_by"]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One sample line: metric name, labels and value."""

    name: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)


def parse_text(text: str) -> list[Sample]:
    """Every sample in `text`, in order; malformed lines are skipped."""
    return list(_samples(text.splitlines()))


def _samples(lines: Iterable[str]) -> Iterator[Sample]:
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        sample = _parse_line(line)
        if sample is not None:
            yield sample


def _parse_line(line: str) -> Sample | None:
    match = _NAME.match(line)
    if match is None:
        return None
    rest = line[match.end() :]
    labels: dict[str, str] = {}
    if rest.startswith("{"):
        end, labels = _parse_labels(rest)
        if end < 0:
            return None
        rest = rest[end:]
    parts = rest.split()
    if not parts:
        return None
    try:
        value = float(parts[0])
    except ValueError:
        return None
    return Sample(match.group(), value, labels)


def _parse_labels(text: str) -> tuple[int, dict[str, str]]:
    """(index after the closing brace, labels) of `{a="x",b="y"}...`; -1 if malformed."""
    labels: dict[str, str] = {}
    position = 1
    while True:
        if text[position:].lstrip().startswith("}"):
            return text.index("}", position) + 1, labels
        match = _LABEL.match(text, position)
        if match is None:
            return -1, labels
        labels[match.group(1)] = _unescape(match.group(2))
        position = match.end()


def _unescape(value: str) -> str:
    return re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group()], value)


def sum_by(
    samples: Iterable[Sample], name: str, keys: tuple[str, ...] = ()
) -> dict[tuple[str, ...], float]:
    """Sum the samples called `name` grouped by the values of the label names `keys`."""
    totals: dict[tuple[str, ...], float] = {}
    for sample in samples:
        if sample.name != name or math.isnan(sample.value):
            continue
        group = tuple(sample.labels.get(key, "") for key in keys)
        totals[group] = totals.get(group, 0.0) + sample.value
    return totals
