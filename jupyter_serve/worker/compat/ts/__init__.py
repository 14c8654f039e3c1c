"""Stand-in for TorchServe's `ts` package inside jupyter_serve workers (see `compat`)."""

from __future__ import annotations

__version__ = "0.12.0"
