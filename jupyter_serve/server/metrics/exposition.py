"""Prometheus text format 0.0.4 written as TorchServe's Java client writes it.

TorchServe 0.12 exposes its metrics through the Java `simpleclient`
(`TextFormat.write004`), whose text differs from Python's `generate_latest`,
and clients match it (TorchServe's postman test expects
`Requests2XX{Level="Host",Hostname=".*",} \\d+\\.\\d+`):

* labels in declaration order, each followed by a comma (`{a="x",b="y",}`);
* values as Java's `Double.toString` (`1.0`, `62.78`, `1.0E7`, `1.5E-5`, `NaN`,
  `+Inf`);
* counters keep their own names and are typed `counter` (no `_total` added);
* `# HELP` and `# TYPE` lines for every family, even one without samples.

Input is prometheus_client `Metric` families (whose sample label dicts keep
their insertion order). Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal

from prometheus_client.metrics_core import Metric

__all__ = ["java_double", "write_families"]


def java_double(value: float) -> str:
    """`value` as Java's `Double.toString` (and simpleclient's +Inf/-Inf/NaN)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    value = float(value)
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)  # shortest round-trip digits, fixed notation in this range
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    mantissa = f"{text[0]}.{text[1:] or '0'}"
    return f"{'-' if sign else ''}{mantissa}E{len(digits) - 1 + exponent}"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample_line(name: str, labels: dict[str, str], value: float) -> str:
    if not labels:
        return f"{name} {java_double(value)}\n"
    body = "".join(f'{key}="{_escape_label(str(val))}",' for key, val in labels.items())
    return f"{name}{{{body}}} {java_double(value)}\n"


def write_families(families: Iterable[Metric]) -> bytes:
    """The exposition of `families`, in their order."""
    out: list[str] = []
    for family in families:
        kind = "untyped" if family.type == "unknown" else family.type
        out.append(f"# HELP {family.name} {_escape_help(family.documentation)}\n")
        out.append(f"# TYPE {family.name} {kind}\n")
        out.extend(_sample_line(s.name, s.labels, s.value) for s in family.samples)
    return "".join(out).encode("utf-8")
