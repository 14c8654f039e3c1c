"""The CPU cores this server may use, and the torch threads each worker gets of them.

`available_cores()` counts the cores this process may run on (its affinity mask) and caps
them by its cgroup's CPU quota, rounded up: a JupyterHub single-user pod limited to two
CPUs on a 64-core node has 2, not 64. Torch's own default there is one OpenMP thread per
core of the node, which spends the pod's quota spinning and stalls the Jupyter server.

`cpu_threads_per_worker` shares those cores among a model's workers. A model that batches
continuously (jupyter_serve/server/pool/continuous.py) leaves one core to the Jupyter
server when there are at least two: its worker goes on to the next step while the server
streams the last one, so they run at the same moment, step after step. An OpenMP team that
holds every core then loses a thread to the server at each step, and the others wait for
it at the next barrier; the server's own loop (the user's kernels, files, terminals) waits
for a core as well.

A short heavy pass is another matter: a prompt's prefill is compute-bound and is what the
requests of a burst are waiting for, the server's core meanwhile mostly idle. A worker
also gets its share of every core without the reserve (`cpu_threads_per_worker` without
`streaming`), as `torch_burst_threads` of its handler's context; the `causal_lm` handler
runs a large enough prefill on them (jupyter_serve/handlers/causal_lm.py).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["available_cores", "cgroup_cpu_limit", "cpu_threads_per_worker"]

CGROUP_ROOT = Path("/sys/fs/cgroup")


def available_cores() -> int:
    """The cores this process may run on, within its cgroup's CPU quota (module docstring)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(CGROUP_ROOT, _own_cgroups())
    return max(1, min(cores, limit) if limit else cores)


def cpu_threads_per_worker(workers: int, cores: int | None = None, streaming: bool = False) -> int:
    """Torch threads for one of `workers` CPU workers sharing the cores (module docstring).

    `streaming`: the model batches continuously, so one core stays with the Jupyter
    server. A model's `torchThreads` overrides this.
    """
    available = cores if cores is not None else available_cores()
    if streaming and available > 1:
        available -= 1
    return max(1, available // max(1, workers))


def cgroup_cpu_limit(root: Path, cgroups: dict[str, str]) -> int | None:
    """The CPU quota of the cgroups in `cgroups` (controller -> path, as /proc/self/cgroup
    lists them) and their parents, in whole cores rounded up; None if there is none."""
    limits: list[float] = []
    unified = cgroups.get("")
    if unified is not None:  # cgroup v2: "<quota> <period>" or "max <period>"
        for folder in _up_from(root, unified):
            fields = _read(folder / "cpu.max").split()
            if len(fields) == 2 and fields[0] != "max":
                limits.append(_cores(fields[0], fields[1]))
    v1 = cgroups.get("cpu")
    if v1 is not None:  # cgroup v1: cpu.cfs_quota_us is -1 without a quota
        for base in (root / "cpu", root / "cpu,cpuacct"):
            for folder in _up_from(base, v1):
                quota = _read(folder / "cpu.cfs_quota_us")
                if quota and not quota.startswith("-"):
                    period = _read(folder / "cpu.cfs_period_us")
                    limits.append(_cores(quota, period))
    usable = [limit for limit in limits if limit > 0]
    return math.ceil(min(usable)) if usable else None


def _own_cgroups() -> dict[str, str]:
    """Controller (v2: "") -> this process's cgroup path, from /proc/self/cgroup."""
    found: dict[str, str] = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _up_from(base: Path, path: str) -> list[Path]:
    """`base`/`path` and each parent folder up to `base` (a quota may sit on an ancestor);
    a container's own view of its cgroup is "/" with the quota at `base`."""
    parts = [part for part in path.split("/") if part and part != ".."]
    return [base.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return ""


def _cores(quota: str, period: str) -> float:
    try:
        return int(quota) / int(period) if int(period) > 0 else 0.0
    except ValueError:
        return 0.0
