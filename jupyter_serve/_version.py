"""The single source of jupyter_serve's version (read by hatch and by the archiver), and of
the TorchServe version whose contract it keeps (which its `ts` stand-in and its KServe
server metadata report)."""

from __future__ import annotations

__version__ = "0.1.0"
TORCHSERVE_VERSION = "0.12.0"
