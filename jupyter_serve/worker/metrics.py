"""`context.metrics`: TorchServe 0.12's metrics cache, whose emissions travel to the server.

The API and its semantics are TorchServe's `MetricCacheAbstract` and
`MetricsCacheYamlImpl` (ts/metrics, docs/metrics.md)::

    metrics.add_metric(name, value, unit, idx=None, dimensions=None, metric_type=COUNTER)
    metrics.add_counter(name, value, idx=None, dimensions=None)
    metrics.add_time(name, value, idx=None, unit="ms", dimensions=None, metric_type=GAUGE)
    metrics.add_size(name, value, idx=None, unit="MB", dimensions=None, metric_type=GAUGE)
    metrics.add_percent(name, value, idx=None, dimensions=None, metric_type=GAUGE)
    metrics.add_error(name, value, dimensions=None)
    metric = metrics.add_metric_to_cache(name, unit, dimension_names=[], metric_type=COUNTER)
    metric.add_or_update(value, dimension_values=[], request_id="")
    metrics.get_metric(name, metric_type=COUNTER)   # MetricsCacheKeyError when absent

* The cache holds one metric per (type, name). `declare` fills it from the
  `model_metrics` section of the server's `metrics_config` YAML, as TorchServe's
  worker does at start, so `get_metric` finds what the YAML declares.
* The `add_*` calls take the cached metric of that name and type, or add one with
  the call's dimension names; they add the default dimensions `ModelName` and
  `Level="Model"` unless given (`add_error`: `Level="Error"` only). A cached metric
  is never redefined by them: values that do not fit its dimension names, or a
  negative counter increment, are logged and dropped, as TorchServe logs them.
* `add_metric_to_cache` checks types as TorchServe does (`MetricsCacheTypeError`:
  the metric type must be a `MetricTypes` enum, names and units strings,
  dimension names a list); `add_time` and `add_size` refuse other units.
* Units are TorchServe's names (`ms` -> Milliseconds, `MB` -> Megabytes, ...).

Each emission is one *observation*, a plain dict the worker sends with its `R`
frame (the load's, or a batch's); the server increments counters, sets gauges
and observes histograms::

    {"name", "value", "unit", "dimensions": {name: value, ...}, "type", "request_id"}

`dimensions` keeps the metric's dimension order, which the server follows for
labels. One cache lives as long as the worker: `begin_batch` points it at a
batch's request ids and `drain` collects what was emitted.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any, TypeAlias

log = logging.getLogger("ts.metrics")

UNIT_NAMES = {
    "ms": "Milliseconds",
    "s": "Seconds",
    "percent": "Percent",
    "count": "Count",
    "MB": "Megabytes",
    "GB": "Gigabytes",
    "kB": "Kilobytes",
    "B": "Bytes",
    "": "unit",
}
TIME_UNITS = ["ms", "s"]
SIZE_UNITS = ["MB", "kB", "GB", "B"]


class MetricTypes(Enum):
    """TorchServe's metric types (`ts.metrics.metric_type_enum.MetricTypes`)."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


class GeneralMetricsCacheError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(f"Generic error: {message}")


class MetricsCacheTypeError(TypeError):
    """An argument of the wrong type (TorchServe's `_check_type`)."""


class MetricsCacheValueError(ValueError):
    """A value TorchServe refuses (a time unit other than ms or s)."""


class MetricsCacheKeyError(KeyError):
    """`get_metric` asked for a metric the cache does not hold."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Dimension:
    """One name/value pair qualifying a metric (`ts.metrics.dimension.Dimension`)."""

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value

    def to_dict(self) -> dict[str, Any]:
        return {"Name": self.name, "Value": self.value}

    def __str__(self) -> str:
        return f"{self.name}:{self.value}"

    def __repr__(self) -> str:
        return f"Dimension({self.name!r}, {self.value!r})"


Dimensions: TypeAlias = Sequence[Any] | Mapping[str, Any] | None


def unit_name(unit: Any) -> str:
    """TorchServe's name for a unit abbreviation (`ts.metrics.unit`); others pass through."""
    return "unit" if unit is None else UNIT_NAMES.get(unit, str(unit))


def as_metric_type(value: Any) -> MetricTypes:
    """Our `MetricTypes` for ours or TorchServe's enum (when torchserve is installed)."""
    if isinstance(value, MetricTypes):
        return value
    if isinstance(value, Enum) and value.value in {kind.value for kind in MetricTypes}:
        return MetricTypes(value.value)
    raise MetricsCacheTypeError("`metric_type` must be a MetricTypes enum")


def dimension_list(dimensions: Dimensions) -> list[Dimension]:
    """`Dimension`s from TorchServe's list of them (or, here too, a plain mapping)."""
    if dimensions is None:
        return []
    if isinstance(dimensions, Mapping):
        return [Dimension(str(k), v) for k, v in dimensions.items()]
    found = []
    for dim in dimensions:
        if not hasattr(dim, "name") or not hasattr(dim, "value"):
            raise MetricsCacheTypeError(f"A dimension needs .name and .value, got {dim!r}")
        found.append(Dimension(dim.name, dim.value))
    return found


def _check_type(value: Any, expected: type, text: str) -> None:
    if not isinstance(value, expected):
        raise MetricsCacheTypeError(text)


class CachedMetric:
    """A metric of the cache (TorchServe's `CachingMetric`): emits into its cache's batch."""

    def __init__(
        self,
        cache: MetricsCache,
        metric_name: str,
        unit: str,
        dimension_names: Sequence[str] | None,
        kind: MetricTypes,
    ) -> None:
        self.cache = cache
        self.metric_name = metric_name
        self.unit = unit_name(unit)
        self.dimension_names = list(dimension_names or [])
        self.metric_type = kind

    def add_or_update(
        self,
        value: float,
        dimension_values: Sequence[Any] | None = (),
        request_id: str | None = "",
    ) -> None:
        """Emit `value`; `dimension_values` follow `dimension_names` (else logged, dropped)."""
        values = None if dimension_values is None else list(dimension_values)
        if values is None or len(values) != len(self.dimension_names):
            self._refuse(value, f"Dimension values: {values} should correspond to "
                         f"Dimension names: {self.dimension_names}")  # fmt: skip
            return
        if self.metric_type is MetricTypes.COUNTER and value < 0:
            self._refuse(value, "Counter metric update value cannot be negative")
            return
        dims = {str(name): str(v) for name, v in zip(self.dimension_names, values, strict=True)}
        self.cache.emit(self, float(value), dims, request_id or None)

    def update(
        self, value: float, request_id: str | None = "", dimensions: Dimensions = None
    ) -> None:
        """TorchServe's older form: the `Dimension` objects replace the dimension names."""
        dims = dimension_list(dimensions)
        self.dimension_names = [d.name for d in dims]
        self.add_or_update(value, [d.value for d in dims], request_id)

    def _refuse(self, value: Any, why: str) -> None:
        log.error("[METRICS]Failed to update metric with name:%s with value: %s: %s",
                  self.metric_name, value, why)  # fmt: skip

    def __repr__(self) -> str:
        return (
            f"CachedMetric({self.metric_name!r}, unit={self.unit!r}, "
            f"dimension_names={self.dimension_names}, type={self.metric_type.value})"
        )


class MetricsCache:
    """`context.metrics`: the worker's metrics, and what they emitted since the last drain."""

    def __init__(self, model_name: str, request_ids: Mapping[int, str] | None = None) -> None:
        self.model_name = model_name
        # At load TorchServe sets one fresh id: load-time metrics are the model's too.
        self.request_ids: dict[int, str] | str = dict(request_ids or {}) or str(uuid.uuid4())
        self.cache: dict[MetricTypes, dict[str, CachedMetric]] = {}
        self._records: list[dict[str, Any]] = []

    # ---- the worker's side ----

    def declare(self, declarations: Sequence[Mapping[str, Any]]) -> None:
        """Add the `model_metrics` of a metrics_config: {"name","unit","dimensions","type"}."""
        for item in declarations:
            names = [str(name) for name in item.get("dimensions") or []]
            kind = MetricTypes(str(item["type"]))
            self.add_metric_to_cache(str(item["name"]), str(item["unit"]), names, kind)

    def begin_batch(self, request_ids: Mapping[int, str]) -> None:
        """Attribute the next emissions to this batch, dropping anything left unsent."""
        self.request_ids = dict(request_ids)
        self._records = []

    def drain(self) -> list[dict[str, Any]]:
        """The observations emitted since `begin_batch` (or the load), and forget them."""
        records, self._records = self._records, []
        return records

    def emit(
        self, metric: CachedMetric, value: float, dimensions: dict[str, str], request_id: str | None
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
        unit: str,
        dimension_names: Sequence[str] | None = None,
        metric_type: Any = MetricTypes.COUNTER,
    ) -> CachedMetric:
        """Add a metric to the cache (replacing one of that name and type) and return it."""
        _check_type(metric_name, str, "`metric_name` must be a str")
        _check_type(unit, str, "`unit` must be a str")
        kind = as_metric_type(metric_type)
        if dimension_names:
            _check_type(dimension_names, list,
                        "`dimension_names` should be a list of dimension name strings")  # fmt: skip
        metric = CachedMetric(self, metric_name, unit, dimension_names, kind)
        self.cache.setdefault(kind, {})[metric_name] = metric
        return metric

    def get_metric(self, metric_name: str, metric_type: Any = MetricTypes.COUNTER) -> CachedMetric:
        """The cached metric of that name and type; `MetricsCacheKeyError` when there is none."""
        _check_type(metric_name, str, "`metric_name` must be a str")
        kind = as_metric_type(metric_type)
        try:
            return self.cache[kind][metric_name]
        except KeyError:
            raise MetricsCacheKeyError(
                f"Metric of type '{kind}' and name '{metric_name}' doesn't exist"
            ) from None

    def add_metric(
        self,
        name: str,
        value: float,
        unit: str,
        idx: int | None = None,
        dimensions: Dimensions = None,
        metric_type: Any = MetricTypes.COUNTER,
    ) -> None:
        self._emit(name, value, unit, idx, dimensions, metric_type)

    def add_counter(
        self, name: str, value: float, idx: int | None = None, dimensions: Dimensions = None
    ) -> None:
        self._emit(name, value, "count", idx, dimensions, MetricTypes.COUNTER)

    def add_time(
        self,
        name: str,
        value: float,
        idx: int | None = None,
        unit: str = "ms",
        dimensions: Dimensions = None,
        metric_type: Any = MetricTypes.GAUGE,
    ) -> None:
        if unit not in TIME_UNITS:
            raise MetricsCacheValueError("the unit for a timed metric should be one of ['ms', 's']")
        self._emit(name, value, unit, idx, dimensions, metric_type)

    def add_size(
        self,
        name: str,
        value: float,
        idx: int | None = None,
        unit: str = "MB",
        dimensions: Dimensions = None,
        metric_type: Any = MetricTypes.GAUGE,
    ) -> None:
        if unit not in SIZE_UNITS:
            raise ValueError("The unit for size based metric is one of ['MB','kB', 'GB', 'B']")
        self._emit(name, value, unit, idx, dimensions, metric_type)

    def add_percent(
        self,
        name: str,
        value: float,
        idx: int | None = None,
        dimensions: Dimensions = None,
        metric_type: Any = MetricTypes.GAUGE,
    ) -> None:
        self._emit(name, value, "percent", idx, dimensions, metric_type)

    def add_error(self, name: str, value: float, dimensions: Dimensions = None) -> None:
        dims = self._with_defaults(dimension_list(dimensions), None)
        metric = self._get_or_add(name, "", dims, MetricTypes.COUNTER)
        metric.add_or_update(value, [d.value for d in dims])

    # ---- helpers ----

    def request_id_for(self, idx: int | None) -> str | None:
        """TorchServe's `_get_req`: request `idx`'s id, else every id of the batch."""
        ids = self.request_ids
        if isinstance(ids, dict):
            if idx is not None and idx in ids:
                return ids[idx]
            return ",".join(ids.values())
        return ids

    def _emit(
        self,
        name: str,
        value: float,
        unit: str,
        idx: int | None,
        dimensions: Dimensions,
        kind: Any,
    ) -> None:
        request_id = self.request_id_for(idx)
        dims = self._with_defaults(dimension_list(dimensions), request_id)
        metric = self._get_or_add(name, unit, dims, kind)
        metric.add_or_update(value, [d.value for d in dims], request_id)

    def _with_defaults(self, dims: list[Dimension], request_id: str | None) -> list[Dimension]:
        """TorchServe's `_add_default_dims`: ModelName and Level="Model" for a request's
        metric, Level="Error" alone without one (add_error), unless the caller gave them."""
        names = {dim.name for dim in dims}
        if request_id is None:
            if "Level" not in names:
                dims.append(Dimension("Level", "Error"))
            return dims
        if "ModelName" not in names:
            dims.append(Dimension("ModelName", self.model_name))
        if "Level" not in names:
            dims.append(Dimension("Level", "Model"))
        return dims

    def _get_or_add(self, name: str, unit: str, dims: list[Dimension], kind: Any) -> CachedMetric:
        try:
            return self.get_metric(name, kind)
        except MetricsCacheKeyError:
            return self.add_metric_to_cache(name, unit, [d.name for d in dims], kind)
