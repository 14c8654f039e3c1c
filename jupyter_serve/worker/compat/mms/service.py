"""`mms.service`: `PredictionException`, forwarded to `jupyter_serve.handlers.exceptions`."""

from __future__ import annotations

from jupyter_serve.worker.compat import forwarder

__getattr__ = forwarder(
    __name__, None, {"PredictionException": "jupyter_serve.handlers.exceptions"}
)
