"""`jupyter_serve.ts_config`: the public import path of the TorchServe `config.properties`
reader and writer (`server/ts_config.py`), as notebooks use it."""

from __future__ import annotations

from jupyter_serve.server.ts_config import *  # noqa: F403
from jupyter_serve.server.ts_config import __all__  # noqa: F401
