"""`mms.context`: jupyter_serve's `Context` (a superset of MMS's)."""

from __future__ import annotations

from jupyter_serve.worker.context import Context, RequestProcessor

__all__ = ["Context", "RequestProcessor"]
