"""Stand-in for Multi Model Server's `mms` package inside jupyter_serve workers."""

from __future__ import annotations
