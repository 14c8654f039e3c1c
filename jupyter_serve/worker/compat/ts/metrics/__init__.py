"""`ts.metrics`: the metric types and dimensions handlers use with `context.metrics`."""

from __future__ import annotations
