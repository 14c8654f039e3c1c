"""`ts.metrics.metric_cache_errors`: the errors `context.metrics` raises."""

from __future__ import annotations

from jupyter_serve.worker.metrics import (
    GeneralMetricsCacheError,
    MetricsCacheKeyError,
    MetricsCacheTypeError,
    MetricsCacheValueError,
)

__all__ = [
    "GeneralMetricsCacheError",
    "MetricsCacheKeyError",
    "MetricsCacheTypeError",
    "MetricsCacheValueError",
]
