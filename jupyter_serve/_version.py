"""The single source of jupyter_serve's version (read by hatch and by the archiver)."""

from __future__ import annotations

__version__ = "0.1.0"
