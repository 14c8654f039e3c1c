"""`MetricFamily`: one Prometheus metric family with TorchServe's semantics, labels by position.

A family keeps one value per tuple of label values, in the order of its label
names, as TorchServe's Java metrics do (`IMetric.addOrUpdate(dimensionValues,
value)`): counters add, gauges set, histograms observe into the Java client's
default buckets (0.005 ... 10, then +Inf). `collect` gives prometheus_client
`Metric` objects under the family's exact name (no `_total` added), which
`exposition.write_families` writes as TorchServe does.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence
from typing import Any

from prometheus_client.metrics_core import Metric

__all__ = ["HISTOGRAM_BUCKETS", "MetricFamily", "help_text", "label_name", "metric_name"]

# simpleclient's Histogram.Builder default buckets (TorchServe's histograms use them).
HISTOGRAM_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)
_BAD_NAME = re.compile(r"[^a-zA-Z0-9_:]")
_BAD_LABEL = re.compile(r"[^a-zA-Z0-9_]")


def help_text(kind: str, unit: str) -> str:
    """TorchServe's HELP text for a metric of this kind and unit."""
    return f"Torchserve prometheus {kind} metric with unit: {unit}"


def metric_name(name: Any) -> str:
    """`name` made a valid Prometheus metric name (other characters become `_`)."""
    text = _BAD_NAME.sub("_", str(name))
    return f"_{text}" if not text or text[0].isdigit() else text


def label_name(name: Any) -> str:
    """`name` made a valid Prometheus label name."""
    text = _BAD_LABEL.sub("_", str(name))
    return f"_{text}" if not text or text[0].isdigit() else text


class MetricFamily:
    """One family: values per label-value tuple, collected as a prometheus `Metric`."""

    def __init__(
        self, name: str, unit: str, kind: str, labelnames: Sequence[str], owner: str = ""
    ) -> None:
        self.name, self.unit, self.kind = name, unit, kind
        self.labelnames = tuple(labelnames)
        self.owner = owner  # "ts" (the server's own) or "model" (handlers')
        self._values: dict[tuple[str, ...], float] = {}
        self._buckets: dict[tuple[str, ...], list[int]] = {}
        self._lock = threading.Lock()

    def fits(self, values: Sequence[str]) -> bool:
        return len(values) == len(self.labelnames)

    def update(self, values: Sequence[str], value: float) -> None:
        """Add (counter), set (gauge) or observe (histogram) `value` for these label values."""
        if not self.fits(values):
            raise ValueError(f"{self.name} has labels {list(self.labelnames)}, got {list(values)}")
        self.add(tuple(str(v) for v in values), value)

    def add(self, key: tuple[str, ...], value: float) -> None:
        """`update` for a key already checked: one label value (a str) per label name."""
        with self._lock:
            if self.kind == "gauge":
                self._values[key] = value
            else:
                self._values[key] = self._values.get(key, 0.0) + value
            if self.kind == "histogram":
                counts = self._buckets.setdefault(key, [0] * (len(HISTOGRAM_BUCKETS) + 1))
                counts[_bucket_index(value)] += 1

    def value(self, values: Sequence[str]) -> float:
        """One series' current value (a histogram's sum); 0 if never set."""
        return self._values.get(tuple(values), 0.0)

    def describe(self) -> list[Metric]:
        return [self._metric()]

    def collect(self) -> list[Metric]:
        metric = self._metric()
        with self._lock:
            for key, value in self._values.items():
                labels = dict(zip(self.labelnames, key, strict=True))
                if self.kind == "histogram":
                    _add_histogram(metric, self.name, labels, value, self._buckets[key])
                else:
                    metric.add_sample(self.name, labels, value)
        return [metric]

    def _metric(self) -> Metric:
        """The family under its exact name (`Metric` would strip a counter's `_total`)."""
        metric = Metric(self.name, help_text(self.kind, self.unit), self.kind)
        metric.name = self.name
        return metric


def _bucket_index(value: float) -> int:
    for index, bound in enumerate(HISTOGRAM_BUCKETS):
        if value <= bound:
            return index
    return len(HISTOGRAM_BUCKETS)


def _add_histogram(
    metric: Metric, name: str, labels: dict[str, str], total: float, counts: list[int]
) -> None:
    cumulative = 0
    for bound, count in zip((*HISTOGRAM_BUCKETS, math.inf), counts, strict=True):
        cumulative += count
        metric.add_sample(f"{name}_bucket", {**labels, "le": _le(bound)}, cumulative)
    metric.add_sample(f"{name}_count", labels, cumulative)
    metric.add_sample(f"{name}_sum", labels, total)


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))
