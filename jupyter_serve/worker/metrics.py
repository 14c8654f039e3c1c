"""`context.metrics`: the custom metrics API of TorchServe handlers, recorded for the server.

The API follows TorchServe 0.12's metrics cache (docs/metrics.md)::

    metrics.add_metric(name, value, unit, idx=None, dimensions=None, metric_type=COUNTER)
    metrics.add_counter(name, value, idx=None, dimensions=None)
    metrics.add_time(name, value, idx=None, unit="ms", dimensions=None, metric_type=GAUGE)
    metrics.add_size(name, value, idx=None, unit="MB", dimensions=None, metric_type=GAUGE)
    metrics.add_percent(name, value, idx=None, dimensions=None, metric_type=GAUGE)
    metrics.add_error(name, value, dimensions=None)
    metric = metrics.add_metric_to_cache(name, unit, dimension_names, metric_type)
    metric.add_or_update(value, dimension_values=(), request_id=None)
    metrics.get_metric(name, metric_type)

`dimensions` is a list of `Dimension(name, value)` (TorchServe's form) or a plain
mapping. The convenience methods add the default dimensions `ModelName` and
`Level` ("Model", or "Error" for `add_error`) unless the caller gives them.

Every call is one *observation*, recorded as a plain dict and sent to the server
with the batch's `R` frame, where counters are incremented by `value`, gauges set
and histograms observed (TorchServe's log mode works the same way)::

    {"name", "value", "unit", "dimensions": {str: str}, "type", "request_id"}

`unit` is TorchServe's unit name ("ms" becomes "Milliseconds", "MB" "Megabytes";
unknown units pass through). One cache lives as long as the worker, so metrics a
handler caches in `initialize` keep working; the service starts a new record list
per batch with `begin_batch` and collects it with `drain`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeAlias

UNIT_NAMES = {
    "ms": "Milliseconds",
    "s": "Seconds",
    "us": "Microseconds",
    "percent": "Percent",
    "count": "Count",
    "B": "Bytes",
    "kB": "Kilobytes",
    "MB": "Megabytes",
    "GB": "Gigabytes",
    "": "unit",
}
TIME_UNITS = ("ms", "s", "us")
SIZE_UNITS = ("MB", "kB", "GB", "B")
DEFAULT_LEVEL = "Model"


class MetricTypes(str, Enum):
    """TorchServe's metric types (`ts.metrics.metric_type_enum.MetricTypes`)."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


class MetricsCacheKeyError(KeyError):
    """`get_metric` asked for a metric that was never added to the cache."""


@dataclass(frozen=True)
class Dimension:
    """One name/value pair qualifying a metric (`ts.metrics.dimension.Dimension`)."""

    name: str
    value: str

    def to_dict(self) -> dict[str, str]:
        return {"Name": self.name, "Value": str(self.value)}

    def __str__(self) -> str:
        return f"{self.name}:{self.value}"


Dimensions: TypeAlias = Sequence[Any] | Mapping[str, Any] | None


def unit_name(unit: str) -> str:
    """TorchServe's name for a unit abbreviation; anything unknown is kept as given."""
    return UNIT_NAMES.get(unit, unit)


def as_metric_type(value: MetricTypes | str) -> MetricTypes:
    """Accept the enum or its string value ("counter", "gauge", "histogram")."""
    if isinstance(value, MetricTypes):
        return value
    name = getattr(value, "value", value)  # another MetricTypes-like enum
    try:
        return MetricTypes(str(name).lower())
    except ValueError:
        raise ValueError(
            f"Unknown metric type {value!r}: use counter, gauge or histogram"
        ) from None


def dimension_pairs(dimensions: Dimensions) -> list[tuple[str, str]]:
    """(name, value) pairs from `Dimension` objects or a mapping."""
    if dimensions is None:
        return []
    if isinstance(dimensions, Mapping):
        return [(str(k), str(v)) for k, v in dimensions.items()]
    pairs = []
    for dim in dimensions:
        if not hasattr(dim, "name") or not hasattr(dim, "value"):
            raise TypeError(f"A dimension needs .name and .value, got {dim!r}")
        pairs.append((str(dim.name), str(dim.value)))
    return pairs


class CachedMetric:
    """A metric definition whose observations land in its cache's current batch."""

    def __init__(
        self,
        cache: MetricsCache,
        name: str,
        unit: str,
        dimension_names: Sequence[str],
        metric_type: MetricTypes,
    ) -> None:
        self.cache = cache
        self.metric_name = name
        self.unit = unit_name(unit)
        self.dimension_names = [str(n) for n in dimension_names]
        self.metric_type = metric_type

    def add_or_update(
        self,
        value: float,
        dimension_values: Sequence[Any] = (),
        request_id: str | None = None,
    ) -> None:
        """Record one observation; `dimension_values` follow `dimension_names`."""
        values = [str(v) for v in dimension_values]
        if len(values) != len(self.dimension_names):
            raise ValueError(
                f"Metric {self.metric_name!r} has dimensions {self.dimension_names}, "
                f"got {len(values)} values: {values}"
            )
        self.cache.record(
            self, float(value), dict(zip(self.dimension_names, values, strict=True)), request_id
        )

    def update(
        self, value: float, request_id: str | None = None, dimensions: Dimensions = None
    ) -> None:
        """TorchServe's older form: dimensions as `Dimension` objects."""
        self.add_or_update(value, [v for _, v in dimension_pairs(dimensions)], request_id)

    def __repr__(self) -> str:
        return (
            f"CachedMetric({self.metric_name!r}, unit={self.unit!r}, "
            f"dimension_names={self.dimension_names}, type={self.metric_type.value})"
        )


class MetricsCache:
    """`context.metrics`: creates metrics, records observations for the current batch."""

    def __init__(self, model_name: str, request_ids: Mapping[int, str] | None = None) -> None:
        self.model_name = model_name
        self.request_ids: dict[int, str] = dict(request_ids or {})
        self._cache: dict[tuple[str, MetricTypes], CachedMetric] = {}
        self._records: list[dict[str, Any]] = []

    # ---- the service's side ----

    def begin_batch(self, request_ids: Mapping[int, str]) -> None:
        """Start recording for a new batch, dropping anything left unsent."""
        self.request_ids = dict(request_ids)
        self._records = []

    def drain(self) -> list[dict[str, Any]]:
        """The observations recorded since `begin_batch`, and forget them."""
        records, self._records = self._records, []
        return records

    def record(
        self,
        metric: CachedMetric,
        value: float,
        dimensions: dict[str, str],
        request_id: str | None,
    ) -> None:
        self._records.append(
            {
                "name": metric.metric_name,
                "value": value,
                "unit": metric.unit,
                "dimensions": dimensions,
                "type": metric.metric_type.value,
                "request_id": request_id,
            }
        )

    # ---- the handler's side ----

    def add_metric_to_cache(
        self,
        metric_name: str,
        unit: str = "count",
        dimension_names: Sequence[str] | None = None,
        metric_type: MetricTypes | str = MetricTypes.COUNTER,
    ) -> CachedMetric:
        """Define (or redefine) a metric and return it for `add_or_update` calls."""
        kind = as_metric_type(metric_type)
        metric = CachedMetric(self, metric_name, unit, dimension_names or [], kind)
        self._cache[(metric_name, kind)] = metric
        return metric

    def get_metric(
        self, metric_name: str, metric_type: MetricTypes | str = MetricTypes.COUNTER
    ) -> CachedMetric:
        try:
            return self._cache[(metric_name, as_metric_type(metric_type))]
        except KeyError:
            raise MetricsCacheKeyError(
                f"Metric of type {metric_type!r} and name {metric_name!r} is not in the cache"
            ) from None

    def add_metric(
        self,
        name: str,
        value: float,
        unit: str = "count",
        idx: int | None = None,
        dimensions: Dimensions = None,
        metric_type: MetricTypes | str = MetricTypes.COUNTER,
    ) -> None:
        self._observe(name, value, unit, idx, dimension_pairs(dimensions), metric_type)

    def add_counter(
        self, name: str, value: float, idx: int | None = None, dimensions: Dimensions = None
    ) -> None:
        pairs = self._with_defaults(dimensions)
        self._observe(name, value, "count", idx, pairs, MetricTypes.COUNTER)

    def add_time(
        self,
        name: str,
        value: float,
        idx: int | None = None,
        unit: str = "ms",
        dimensions: Dimensions = None,
        metric_type: MetricTypes | str = MetricTypes.GAUGE,
    ) -> None:
        _check_unit(unit, TIME_UNITS, "time")
        self._observe(name, value, unit, idx, self._with_defaults(dimensions), metric_type)

    def add_size(
        self,
        name: str,
        value: float,
        idx: int | None = None,
        unit: str = "MB",
        dimensions: Dimensions = None,
        metric_type: MetricTypes | str = MetricTypes.GAUGE,
    ) -> None:
        _check_unit(unit, SIZE_UNITS, "size")
        self._observe(name, value, unit, idx, self._with_defaults(dimensions), metric_type)

    def add_percent(
        self,
        name: str,
        value: float,
        idx: int | None = None,
        dimensions: Dimensions = None,
        metric_type: MetricTypes | str = MetricTypes.GAUGE,
    ) -> None:
        pairs = self._with_defaults(dimensions)
        self._observe(name, value, "percent", idx, pairs, metric_type)

    def add_error(self, name: str, value: float, dimensions: Dimensions = None) -> None:
        pairs = self._with_defaults(dimensions, level="Error")
        self._observe(name, value, "count", None, pairs, MetricTypes.COUNTER)

    # ---- helpers ----

    def request_id_for(self, idx: int | None) -> str | None:
        """The id of request `idx`, or all of the batch's ids joined by commas."""
        if idx is not None and idx in self.request_ids:
            return self.request_ids[idx]
        return ",".join(self.request_ids.values()) or None

    def _with_defaults(
        self, dimensions: Dimensions, level: str = DEFAULT_LEVEL
    ) -> list[tuple[str, str]]:
        pairs = dimension_pairs(dimensions)
        names = {name for name, _ in pairs}
        if "ModelName" not in names:
            pairs.append(("ModelName", self.model_name))
        if "Level" not in names:
            pairs.append(("Level", level))
        return pairs

    def _observe(
        self,
        name: str,
        value: float,
        unit: str,
        idx: int | None,
        pairs: Iterable[tuple[str, str]],
        metric_type: MetricTypes | str,
    ) -> None:
        pairs = list(pairs)
        kind = as_metric_type(metric_type)
        names = [n for n, _ in pairs]
        metric = self._cache.get((name, kind))
        if metric is None or metric.dimension_names != names or metric.unit != unit_name(unit):
            metric = self.add_metric_to_cache(name, unit, names, kind)
        metric.add_or_update(value, [v for _, v in pairs], self.request_id_for(idx))


def _check_unit(unit: str, allowed: Sequence[str], what: str) -> None:
    if unit not in allowed:
        raise ValueError(f"Unit for a {what} metric must be one of {list(allowed)}, got {unit!r}")
