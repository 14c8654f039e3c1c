"""Process facts for the describe JSON: resident memory and TorchServe's date format."""

from __future__ import annotations

import importlib
from datetime import datetime

__all__ = ["rss_bytes", "torchserve_time"]


def torchserve_time(moment: datetime) -> str:
    """`yyyy-MM-dd'T'HH:mm:ss.SSS'Z'` of a UTC datetime, as TorchServe's JSON shows dates."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def rss_bytes(pid: int) -> int:
    """Resident set size of process `pid` in bytes: psutil if installed, else /proc; 0 if gone."""
    try:
        psutil = importlib.import_module("psutil")  # optional; untyped
    except ImportError:
        return _proc_rss_bytes(pid)
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:  # gone, or not ours to read
        return 0


def _proc_rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
