"""`ts.torch_handler.request_envelope.json`: `JSONEnvelope`.

From `jupyter_serve.handlers.envelopes`.
"""

from __future__ import annotations

from jupyter_serve.handlers.envelopes import JSONEnvelope

__all__ = ["JSONEnvelope"]
