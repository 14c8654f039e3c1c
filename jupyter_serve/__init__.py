"""jupyter_serve: serve PyTorch models from inside Jupyter, the TorchServe way.

This module stays light on purpose: `python -m jupyter_serve.worker` imports it
first, and workers must never pull in tornado or jupyter_server. Every entry
point below imports its implementation lazily.
"""

from __future__ import annotations

from typing import Any

from jupyter_serve._version import __version__

__all__ = ["__version__", "load_ipython_extension"]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """Tell jupyter_server where the extension app lives."""
    from jupyter_serve.server.app import ServeApp

    return [{"module": "jupyter_serve", "app": ServeApp}]


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext jupyter_serve`: register the magics in an IPython kernel."""
    from jupyter_serve.kernel.magics import load_ipython_extension as _load

    _load(ipython)
