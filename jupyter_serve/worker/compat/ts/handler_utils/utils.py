"""`ts.handler_utils.utils`: `send_intermediate_predict_response` (`worker.streaming`)."""

from __future__ import annotations

from jupyter_serve.worker.compat import forwarder

__getattr__ = forwarder(
    __name__,
    None,
    {"send_intermediate_predict_response": "jupyter_serve.worker.streaming"},
)
