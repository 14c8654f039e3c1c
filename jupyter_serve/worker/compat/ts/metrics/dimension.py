"""`ts.metrics.dimension`: `Dimension(name, value)` for `context.metrics` calls."""

from __future__ import annotations

from jupyter_serve.worker.metrics import Dimension

__all__ = ["Dimension"]
