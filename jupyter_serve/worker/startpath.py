"""A worker's `sys.path` at start: nothing from the folder it was started in.

``python -m`` puts its working directory first on `sys.path` unless `-P` was given
(Python 3.11+). Workers and the worker factory start in the folder holding
jupyter_serve (jupyter_serve.server.pool.environment), never in the Jupyter root, so that
entry adds nothing; `drop_start_entry` removes it even so, before anything is
imported from `sys.path` afterwards, leaving only the model's own folder (added
when it loads, worker.loader), its dependencies (`PYTHONPATH`) and the environment.
"""

from __future__ import annotations

import os
import sys

__all__ = ["drop_start_entry"]


def drop_start_entry() -> None:
    """Remove the working directory `python -m` put first on `sys.path`, if it did."""
    if getattr(sys.flags, "safe_path", False) or not sys.path:
        return
    if sys.path[0] in ("", os.getcwd()):
        del sys.path[0]
