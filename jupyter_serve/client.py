"""`jupyter_serve.client`: the public import path of the HTTP client (`kernel/client.py`),
as notebooks use it (`from jupyter_serve.client import ServeClient, discover`)."""

from __future__ import annotations

from jupyter_serve.kernel.client import *  # noqa: F403
from jupyter_serve.kernel.client import __all__  # noqa: F401
