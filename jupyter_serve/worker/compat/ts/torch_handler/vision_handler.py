"""`ts.torch_handler.vision_handler`: `VisionHandler`, from `jupyter_serve.handlers.vision`."""

from __future__ import annotations

from jupyter_serve.worker.compat import forwarder

__getattr__ = forwarder(__name__, "jupyter_serve.handlers.vision")
