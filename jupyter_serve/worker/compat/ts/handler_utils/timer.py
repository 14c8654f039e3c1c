"""`ts.handler_utils.timer`: the `timed` profiling decorator (`jupyter_serve.handlers.timer`)."""

from __future__ import annotations

from jupyter_serve.worker.compat import forwarder

__getattr__ = forwarder(__name__, "jupyter_serve.handlers.timer")
