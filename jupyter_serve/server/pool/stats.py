"""Process facts: resident and proportional memory, and TorchServe's date format.

`rss_bytes` is what describe's `memoryUsage` reports, as TorchServe does: every page
the worker maps, those it shares with the worker factory and the other workers
(torch's libraries and heap, mapped weights) counted in full. `pss_bytes` is the
worker's own share: its private pages plus each shared page divided by the number
of processes mapping it (Linux's proportional set size), so an extra forked worker
shows the few MiB it really adds; the panel and the notebook dashboard show it.
"""

from __future__ import annotations

import importlib
import os
from datetime import datetime

__all__ = ["pss_bytes", "rss_bytes", "torchserve_time"]


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


def pss_bytes(pid: int) -> int:
    """Proportional set size of process `pid` in bytes (/proc/PID/smaps_rollup, Linux 4.14+);
    its resident size where the kernel has no such file; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        return rss_bytes(pid) if _alive(pid) else 0
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _alive(pid: int) -> bool:
    return pid > 0 and (os.path.exists(f"/proc/{pid}") or not os.path.isdir("/proc"))
