"""`ts.torch_handler.text_handler`: `TextHandler`, from jupyter_serve.handlers."""

from __future__ import annotations

from jupyter_serve.worker.compat import forwarder

__getattr__ = forwarder(__name__, "jupyter_serve.handlers.text_handler")
