"""`ts.context`: jupyter_serve's TorchServe-compatible `Context`."""

from __future__ import annotations

from jupyter_serve.worker.context import Context, RequestProcessor

__all__ = ["Context", "RequestProcessor"]
