"""`jupyter_serve.widgets`: the public import path of the notebook widgets
(`kernel/widgets/`), loaded on first use as there."""

from __future__ import annotations

from jupyter_serve.kernel.widgets import __all__, __getattr__  # noqa: F401
