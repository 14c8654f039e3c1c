"""`ts.torch_handler`: the default handlers, forwarded to `jupyter_serve.handlers`."""

from __future__ import annotations
