"""Stand-in for TorchServe's `ts` package inside jupyter_serve workers (see `compat`)."""

from __future__ import annotations

from jupyter_serve._version import TORCHSERVE_VERSION

__version__ = TORCHSERVE_VERSION
