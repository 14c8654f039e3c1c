"""`ts.torch_handler.request_envelope.body`: `BodyEnvelope`.

From `jupyter_serve.handlers.envelopes`.
"""

from __future__ import annotations

from jupyter_serve.handlers.envelopes import BodyEnvelope

__all__ = ["BodyEnvelope"]
