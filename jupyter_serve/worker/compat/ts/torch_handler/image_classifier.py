"""`ts.torch_handler.image_classifier`: `ImageClassifier`, from jupyter_serve.handlers."""

from __future__ import annotations

from jupyter_serve.worker.compat import forwarder

__getattr__ = forwarder(__name__, "jupyter_serve.handlers.image_classifier")
