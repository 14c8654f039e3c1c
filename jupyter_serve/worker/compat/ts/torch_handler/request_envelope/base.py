"""`ts.torch_handler.request_envelope.base`: `BaseEnvelope`.

From `jupyter_serve.handlers.envelopes`.
"""

from __future__ import annotations

from jupyter_serve.handlers.envelopes import BaseEnvelope

__all__ = ["BaseEnvelope"]
