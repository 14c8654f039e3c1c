"""Where this package is installed: `PACKAGE_ROOT`, the folder holding `jupyter_serve`.

A worker gets it first on its `PYTHONPATH` (server/pool/environment.py) so that it
imports this very copy of the package, and keeps it first on `sys.path` when a model's
own folders are added (worker/warm.py).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
