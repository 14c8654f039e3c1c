"""`jupyter_serve.widgets.explanations`: the public import path of the explanation viewer
(`kernel/widgets/explanations.py`)."""

from __future__ import annotations

from jupyter_serve.kernel.widgets.explanations import *  # noqa: F403
from jupyter_serve.kernel.widgets.explanations import __all__  # noqa: F401
