"""GPU facts: a fake `pynvml` module stands in for NVML; the real one degrades here (no GPU)."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import pytest

from jupyter_serve.server import devices
from jupyter_serve.server.models import DeviceType
from jupyter_serve.wire.errors import BadRequest

MIB = 1024 * 1024


@dataclass
class Rates:
    gpu: int
    memory: int


@dataclass
class Memory:
    used: int
    total: int
    free: int = 0


class FakeNvml(types.ModuleType):
    """The slice of pynvml that devices.py calls, over a list of (Rates, Memory) per GPU."""

    class NVMLError(Exception):
        pass

    def __init__(self, gpus: list[tuple[Rates, Memory]], *, init_fails: bool = False) -> None:
        super().__init__("pynvml")
        self.gpus = gpus
        self.init_fails = init_fails
        self.open = 0  # nvmlInit calls not yet matched by nvmlShutdown
        self.uuids = {f"GPU-{i:04d}": i for i in range(len(gpus))}

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise self.NVMLError("NVML Shared Library Not Found")
        self.open += 1

    def nvmlShutdown(self) -> None:
        self.open -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.gpus):
            raise self.NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return self.uuids[uuid]

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Rates:
        return self.gpus[handle][0]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Memory:
        return self.gpus[handle][1]


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml(
        [
            (Rates(gpu=7, memory=3), Memory(used=1930 * MIB, total=16000 * MIB)),
            (Rates(gpu=99, memory=50), Memory(used=8000 * MIB + 5, total=16000 * MIB)),
        ]
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_gpu_count_from_nvml_and_balanced_init_shutdown(nvml: FakeNvml) -> None:
    assert devices.gpu_count(env={}) == 2
    assert nvml.open == 0


def test_gpu_count_limited_by_the_servers_visible_devices(nvml: FakeNvml) -> None:
    assert devices.gpu_count(env={"CUDA_VISIBLE_DEVICES": "1"}) == 1
    assert devices.gpu_count(env={"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert devices.gpu_count(env={"CUDA_VISIBLE_DEVICES": "-1"}) == 0
    assert devices.gpu_count(env={"CUDA_VISIBLE_DEVICES": "0,-1,1"}) == 1


def test_gpu_usage_is_torchserves_string(nvml: FakeNvml) -> None:
    assert devices.gpu_usage(0, env={}) == (
        "gpuId::0 utilization.gpu [%]::7 % utilization.memory [%]::3 % memory.used [MiB]::1930 MiB"
    )
    assert nvml.open == 0


def test_gpu_usage_maps_ids_through_the_servers_visible_devices(nvml: FakeNvml) -> None:
    # Server id 0 is physical GPU 1 when the server runs with CUDA_VISIBLE_DEVICES=1.
    usage = devices.gpu_usage(0, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert usage.startswith("gpuId::0 utilization.gpu [%]::99 % utilization.memory [%]::50 %")
    by_uuid = devices.gpu_usage(0, env={"CUDA_VISIBLE_DEVICES": "GPU-0001"})
    assert "utilization.gpu [%]::99 %" in by_uuid


def test_gpu_usage_na_for_cpu_workers_and_unknown_gpus(nvml: FakeNvml) -> None:
    assert devices.gpu_usage(None, env={}) == "N/A"
    assert devices.gpu_usage(5, env={}) == "N/A"
    assert devices.gpu_usage(1, env={"CUDA_VISIBLE_DEVICES": "0"}) == "N/A"


def test_gpu_stats_for_every_gpu(nvml: FakeNvml) -> None:
    stats = devices.gpu_stats(env={})
    assert [s["id"] for s in stats] == [0, 1]
    assert stats[0] == {
        "id": 0,
        "utilization": 7,
        "memory_utilization": 3,
        "memory_used_mib": 1930,
        "memory_total_mib": 16000,
        "memory_used_percent": round(1930 / 16000 * 100, 2),
    }
    assert stats[1]["memory_used_mib"] == 8000  # floor, as nvidia-smi's MiB


def test_failing_nvml_init_degrades(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([], init_fails=True))
    assert devices.gpu_count(env={}) == 0
    assert devices.gpu_usage(0, env={}) == "N/A"
    assert devices.gpu_stats(env={}) == []
    assert devices.worker_env(None, env={}) == {}


def test_missing_pynvml_module_degrades(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    assert devices.gpu_count(env={}) == 0
    assert devices.gpu_usage(0, env={}) == "N/A"


def test_real_pynvml_without_a_gpu_degrades() -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - only on a machine with a GPU
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML; the degraded path needs one without")
    assert devices.gpu_count() == 0
    assert devices.gpu_usage(0) == "N/A"
    assert devices.gpu_stats() == []


def test_assign_devices_round_robin() -> None:
    assert devices.assign_devices(5, DeviceType.GPU, (), 2) == [0, 1, 0, 1, 0]
    assert devices.assign_devices(3, DeviceType.GPU, (1,), 2) == [1, 1, 1]
    assert devices.assign_devices(2, "gpu", (3, 0, 2), 4, start=2) == [2, 3]


def test_assign_devices_cpu_when_asked_or_without_gpus() -> None:
    assert devices.assign_devices(2, DeviceType.CPU, (0,), 2) == [None, None]
    assert devices.assign_devices(2, DeviceType.GPU, (), 0) == [None, None]
    assert devices.assign_devices(0, DeviceType.GPU, (), 2) == []


def test_assign_devices_refuses_invisible_ids() -> None:
    with pytest.raises(BadRequest, match=r"deviceIds \[2\].*sees 2 GPU\(s\), ids 0..1"):
        devices.assign_devices(1, DeviceType.GPU, (0, 2), 2)


def test_worker_env_gpu_worker_sees_only_its_gpu() -> None:
    assert devices.worker_env(1, env={}) == {"CUDA_VISIBLE_DEVICES": "1"}
    server_env = {"CUDA_VISIBLE_DEVICES": "4,GPU-abc"}
    assert devices.worker_env(0, env=server_env) == {"CUDA_VISIBLE_DEVICES": "4"}
    assert devices.worker_env(1, env=server_env) == {"CUDA_VISIBLE_DEVICES": "GPU-abc"}
    with pytest.raises(BadRequest, match="GPU 2 is not among"):
        devices.worker_env(2, env=server_env)


def test_worker_env_cpu_worker_hidden_from_gpus_only_when_they_exist(nvml: FakeNvml) -> None:
    assert devices.worker_env(None, env={}) == {"CUDA_VISIBLE_DEVICES": ""}
    assert devices.worker_env(None, gpus=0) == {}
    assert devices.worker_env(None, gpus=1) == {"CUDA_VISIBLE_DEVICES": ""}
