"""`ts.metrics.metric_type_enum`: `MetricTypes` (counter, gauge, histogram)."""

from __future__ import annotations

from jupyter_serve.worker.metrics import MetricTypes

__all__ = ["MetricTypes"]
