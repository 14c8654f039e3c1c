"""GPU facts for the server process: how many GPUs, their usage, and which GPU each worker gets.

NVML (the `pynvml` module of nvidia-ml-py) is asked afresh on every call: nothing
is probed at import and nothing is cached, so a machine without a GPU (where
`pynvml.nvmlInit()` raises) simply reports 0 GPUs, `"N/A"` and `[]`.

GPU ids: an id here is an index into the GPUs the *server* process may use. When
the server runs with `CUDA_VISIBLE_DEVICES` set (say `"2,3"`), id 0 means the
entry `"2"` and id 1 means `"3"`; without it, ids are NVML's device indices.

A GPU worker is started with `CUDA_VISIBLE_DEVICES` naming its one GPU
(`worker_env`), so inside the worker that GPU is `cuda:0` and the worker's
`context.system_properties["gpu_id"]` is 0, whatever the server-side id. CPU
workers on a machine with GPUs get `CUDA_VISIBLE_DEVICES=""` so a CPU model
never grabs GPU memory. Caveat: `CUDA_VISIBLE_DEVICES` integers follow CUDA's
device order, NVML's indices follow PCI bus order; they agree unless the two
orders differ (set `CUDA_DEVICE_ORDER=PCI_BUS_ID` to make sure).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypedDict

from jupyter_serve.wire.errors import BadRequest

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
_MIB = 1024 * 1024


class GpuStats(TypedDict):
    """One GPU's gauges, as the metrics route and the dashboard show them."""

    id: int
    utilization: int  # % of time a kernel ran (nvidia-smi utilization.gpu)
    memory_utilization: int  # % of time memory was read or written (utilization.memory)
    memory_used_mib: int
    memory_total_mib: int
    memory_used_percent: float  # used / total * 100 (TorchServe's GPUMemoryUtilization)


@contextmanager
def _nvml() -> Iterator[Any]:
    """The initialised `pynvml` module, or None when NVML (or the module) is unavailable."""
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        yield None
        return
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _env_entries(env: Mapping[str, str]) -> list[str] | None:
    """The server's `CUDA_VISIBLE_DEVICES` entries (None when unset), cut at the first bad one."""
    value = env.get(VISIBLE_ENV)
    if value is None:
        return None
    entries: list[str] = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry or entry.startswith("-"):
            break  # CUDA ignores everything from the first invalid entry on
        entries.append(entry)
    return entries


def _device_handle(nvml: Any, gpu_id: int, env: Mapping[str, str]) -> Any:
    entries = _env_entries(env)
    if entries is None:
        return nvml.nvmlDeviceGetHandleByIndex(gpu_id)
    entry = entries[gpu_id]
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    return nvml.nvmlDeviceGetHandleByUUID(entry)


def gpu_count(env: Mapping[str, str] | None = None) -> int:
    """How many GPUs the server may use: 0 without NVML, else NVML's count or the env's list."""
    env = os.environ if env is None else env
    with _nvml() as nvml:
        if nvml is None:
            return 0
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError:
            return 0
    entries = _env_entries(env)
    return count if entries is None else min(count, len(entries))


def gpu_usage(gpu_id: int | None, env: Mapping[str, str] | None = None) -> str:
    """TorchServe's `gpuUsage` string for a worker's GPU; `"N/A"` for CPU or without NVML.

    Example: `"gpuId::0 utilization.gpu [%]::0 % utilization.memory [%]::0 % memory.used
    [MiB]::1930 MiB"` (the format of TorchServe's `nvidia-smi --format=csv` query).
    """
    stats = _stats_for(gpu_id, os.environ if env is None else env) if gpu_id is not None else None
    if stats is None:
        return "N/A"
    return (
        f"gpuId::{gpu_id} utilization.gpu [%]::{stats['utilization']} % "
        f"utilization.memory [%]::{stats['memory_utilization']} % "
        f"memory.used [MiB]::{stats['memory_used_mib']} MiB"
    )


def gpu_stats(env: Mapping[str, str] | None = None) -> list[GpuStats]:
    """Gauges of every GPU the server may use; `[]` without a GPU."""
    env = os.environ if env is None else env
    stats = (_stats_for(gpu_id, env) for gpu_id in range(gpu_count(env)))
    return [item for item in stats if item is not None]


def _stats_for(gpu_id: int, env: Mapping[str, str]) -> GpuStats | None:
    with _nvml() as nvml:
        if nvml is None:
            return None
        try:
            handle = _device_handle(nvml, gpu_id, env)
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        except (nvml.NVMLError, IndexError):
            return None
    used, total = int(memory.used), int(memory.total)
    return GpuStats(
        id=gpu_id,
        utilization=int(rates.gpu),
        memory_utilization=int(rates.memory),
        memory_used_mib=used // _MIB,
        memory_total_mib=total // _MIB,
        memory_used_percent=round(used * 100 / total, 2) if total else 0.0,
    )


def assign_devices(
    count: int,
    device_type: str,
    device_ids: Sequence[int],
    visible: int,
    *,
    start: int = 0,
) -> list[int | None]:
    """GPU ids for workers `start .. start+count-1`, round-robin; None for each CPU worker.

    Worker k gets `ids[k % len(ids)]`, where `ids` is `device_ids` or every visible GPU.
    `device_type` is a `models.DeviceType` (or its value); `visible` is `gpu_count()`.
    """
    if getattr(device_type, "value", device_type) != "gpu" or visible <= 0:
        return [None] * count
    ids = tuple(device_ids) or tuple(range(visible))
    unknown = [gpu for gpu in ids if not 0 <= gpu < visible]
    if unknown:
        raise BadRequest(
            f"deviceIds {unknown} name GPUs that are not visible: "
            f"this server sees {visible} GPU(s), ids 0..{visible - 1}."
        )
    return [ids[(start + k) % len(ids)] for k in range(count)]


def worker_env(
    gpu_id: int | None, *, gpus: int | None = None, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment variables a worker needs for its device (merged over the server's env).

    A GPU worker sees only its GPU (`CUDA_VISIBLE_DEVICES` = that GPU, so it is
    `cuda:0` inside); a CPU worker sees none when GPUs exist (`gpus`, default
    `gpu_count()`), and gets nothing extra on a machine without GPUs.
    """
    env = os.environ if env is None else env
    if gpu_id is None:
        has_gpus = (gpu_count(env) if gpus is None else gpus) > 0
        return {VISIBLE_ENV: ""} if has_gpus else {}
    entries = _env_entries(env)
    if entries is None:
        return {VISIBLE_ENV: str(gpu_id)}
    if not 0 <= gpu_id < len(entries):
        raise BadRequest(f"GPU {gpu_id} is not among {VISIBLE_ENV}={env[VISIBLE_ENV]!r}.")
    return {VISIBLE_ENV: entries[gpu_id]}
