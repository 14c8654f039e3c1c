"""`ts.utils.util`: `PredictionException` and the label helpers of `jupyter_serve.handlers`."""

from __future__ import annotations

from jupyter_serve.worker.compat import forwarder

__getattr__ = forwarder(
    __name__,
    "jupyter_serve.handlers.utils",
    {"PredictionException": "jupyter_serve.handlers.exceptions"},
)
