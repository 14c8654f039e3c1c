"""`ts.torch_handler.base_handler`: `BaseHandler`, from `jupyter_serve.handlers.base`."""

from __future__ import annotations

from jupyter_serve.worker.compat import forwarder

__getattr__ = forwarder(__name__, "jupyter_serve.handlers.base")
