"""The host's gauges TorchServe reports, read when `/metrics` is scraped.

TorchServe's `ts/metrics/system_metrics.py` reads these with psutil every minute;
here they are read at scrape time, with the same names, units and values:

* `CPUUtilization` (percent, `psutil.cpu_percent()` since the previous scrape),
  `MemoryUsed`, `MemoryAvailable` (MB), `MemoryUtilization` (percent),
  `DiskUsage`, `DiskAvailable` (GB of "/"), `DiskUtilization` (percent);
* `GPUUtilization`, `GPUMemoryUtilization` (percent), `GPUMemoryUsed` (MB) per
  GPU, from `devices.gpu_stats()` (none without a GPU).

psutil is optional (jupyter_serve does not depend on it): without it the host
gauges have no samples, as the GPU gauges have none without a GPU.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jupyter_serve.server.devices import GpuStats

__all__ = ["GPU_GAUGES", "HOST_GAUGES", "gpu_readings", "host_readings"]

HOST_GAUGES = (
    "CPUUtilization",
    "MemoryUsed",
    "MemoryAvailable",
    "MemoryUtilization",
    "DiskUsage",
    "DiskUtilization",
    "DiskAvailable",
)
GPU_GAUGES = {
    "GPUUtilization": "utilization",
    "GPUMemoryUtilization": "memory_used_percent",
    "GPUMemoryUsed": "memory_used_mib",
}
_MB = 1024 * 1024
_GB = 1024 * _MB


def host_readings() -> dict[str, float]:
    """The host gauges now, by name; empty without psutil."""
    try:
        psutil: Any = importlib.import_module("psutil")  # optional; untyped
    except ImportError:
        return {}
    memory = psutil.virtual_memory()
    disk = psutil.disk_usage("/")
    return {
        "CPUUtilization": float(psutil.cpu_percent()),
        "MemoryUsed": memory.used / _MB,
        "MemoryAvailable": memory.available / _MB,
        "MemoryUtilization": float(memory.percent),
        "DiskUsage": disk.used / _GB,
        "DiskUtilization": float(disk.percent),
        "DiskAvailable": disk.free / _GB,
    }


def gpu_readings(stats: Sequence[GpuStats]) -> dict[str, list[tuple[str, float]]]:
    """Each GPU gauge as (device id, value) pairs."""
    return {
        name: [(str(gpu["id"]), float(gpu[key])) for gpu in stats]  # type: ignore[literal-required]
        for name, key in GPU_GAUGES.items()
    }
