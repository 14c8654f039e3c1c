"""`ts.torch_handler.request_envelope.kservev2`: `KServev2Envelope`.

From `jupyter_serve.handlers.envelopes`.
"""

from __future__ import annotations

from jupyter_serve.handlers.envelopes import KServev2Envelope

__all__ = ["KServev2Envelope"]
