"""`ts.torch_handler.request_envelope.kserve`: `KServeEnvelope`.

From `jupyter_serve.handlers.envelopes`.
"""

from __future__ import annotations

from jupyter_serve.handlers.envelopes import KServeEnvelope

__all__ = ["KServeEnvelope"]
