"""`python -m jupyter_serve.archive`: the same command as `jupyter-serve-archiver`."""

from __future__ import annotations

import sys

from jupyter_serve.archive.cli import main

sys.exit(main())
