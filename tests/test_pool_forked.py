"""Forked workers: isolated from each other and from the factory, sharing weights.

Real factory, real forked workers. The GPUs are fake at both ends: NVML in the
server (`test_devices.FakeNvml`: the pool sees two GPUs and gives each worker
its `CUDA_VISIBLE_DEVICES`) and the CUDA driver in every worker process
(`tests/fake_cuda/sitecustomize.py`, which the factory loads at start, so every
worker it forks inherits it: each process that initialises it is written down,
and, as with real CUDA, a process forked from one that had cannot initialise it).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from factory_harness import Fleet, ask, run, spec_maker, threads_of
from test_devices import MIB, FakeNvml, Memory, Rates

from jupyter_serve.server import devices
from jupyter_serve.server.models import DeviceType, ModelSpec

pytest.importorskip("torch")

FAKE_CUDA = str(Path(__file__).with_name("fake_cuda"))

PROBE = """
import json
import os
import re
import threading

import torch


def probe():
    return {
        "pid": os.getpid(),
        "cuda": torch.cuda.is_initialized(),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "threads": threading.active_count(),
    }
"""

# Initialises CUDA (the fake driver starts its thread) and starts two threads of its own.
GPU_HANDLER = (
    PROBE
    + """

class Handler:
    def initialize(self, context):
        torch.cuda.init()
        for _ in range(2):
            threading.Thread(target=threading.Event().wait, daemon=True).start()

    def handle(self, data, context):
        return [probe() for _ in data]
"""
)

CPU_HANDLER = (
    PROBE
    + """

def handle(data, context):
    return data and [probe() for _ in data]
"""
)


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., ModelSpec]:
    return spec_maker(tmp_path)


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Two fake GPUs for the server, the fake CUDA driver for worker processes; its log."""
    gpu = (Rates(gpu=0, memory=0), Memory(used=0, total=16000 * MIB))
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([gpu, gpu]))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    log = tmp_path / "cuda-initialised-by"
    monkeypatch.setenv("FAKE_CUDA_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([FAKE_CUDA, os.environ.get("PYTHONPATH", "")]))
    return log


def test_threads_and_cuda_of_a_handler_stay_in_its_worker_and_never_reach_the_factory(
    make_spec: Callable[..., ModelSpec], fake_gpus: Path
) -> None:
    gpu = {"device_type": DeviceType.GPU, "handler": "handler:Handler"}

    async def main() -> tuple[dict[str, Any], dict[str, int]]:
        async with Fleet() as fleet:
            specs = {
                "first": make_spec("first", GPU_HANDLER, device_ids=(0,), **gpu),
                "cpu": make_spec("cpu", CPU_HANDLER),
                "second": make_spec("second", GPU_HANDLER, device_ids=(1,), **gpu),
            }
            pools = {
                name: fleet.pool(spec, gpu_count=devices.gpu_count) for name, spec in specs.items()
            }
            for pool in pools.values():  # in this order: each forked after the ones before
                assert (await pool.scale(1)).ok, pool.recent_logs()
            answers = {name: await ask(pool) for name, pool in pools.items()}
            pid = fleet.factory.pid or 0
            return answers, {"pid": pid, "threads": threads_of(pid)}

    answers, factory = run(main())
    initialised = fake_gpus.read_text().splitlines()
    first, cpu, second = answers["first"], answers["cpu"], answers["second"]
    assert sorted(initialised) == sorted([f"{first['pid']} 0", f"{second['pid']} 1"])
    assert (factory["threads"], str(factory["pid"]) in " ".join(initialised)) == (1, False)
    driver_and_own = 1 + 1 + 2  # the main thread, the driver's, the handler's two
    assert first == {"pid": first["pid"], "cuda": True, "visible": "0", "threads": driver_and_own}
    assert second == {"pid": second["pid"], "cuda": True, "visible": "1", "threads": driver_and_own}
    assert cpu == {"pid": cpu["pid"], "cuda": False, "visible": "", "threads": 1}


# ---- shared weights ------------------------------------------------------------------------

BIG_MODEL = """
import torch


class Big(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4096, 6144)  # 96 MiB of float32 weights

    def forward(self, x):
        return self.layer(x)
"""

# BaseHandler's default loading, then every weight read once (all pages touched).
BIG_HANDLER = """
import json
import os
import re

from jupyter_serve.handlers.base import BaseHandler


class Handler(BaseHandler):
    def initialize(self, context):
        super().initialize(context)
        self.total = float(sum(p.sum() for p in self.model.parameters()))

    def handle(self, data, context):
        return [{"pid": os.getpid(), "total": self.total} for _ in data]
"""
WEIGHTS_BYTES = 4096 * 6144 * 4


def big_model(folder: Path) -> Path:
    import torch

    folder.mkdir()
    (folder / "model.py").write_text(BIG_MODEL)
    (folder / "handler.py").write_text(BIG_HANDLER)
    layer = torch.nn.Linear(4096, 6144).state_dict()
    torch.save({f"layer.{name}": value for name, value in layer.items()}, folder / "weights.pt")
    info = {"modelName": "big", "handler": "handler.py", "modelFile": "model.py",
            "serializedFile": "weights.pt"}  # fmt: skip
    (folder / "MAR-INF").mkdir()
    (folder / "MAR-INF" / "MANIFEST.json").write_text(json.dumps({"model": info}))
    return folder


def rollup(pid: int) -> dict[str, int]:
    """/proc/PID/smaps_rollup in bytes: Rss, Pss, Pss_Anon, Pss_File, ..."""
    figures = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value, *_ = line.split()
        figures[name.rstrip(":")] = int(value) * 1024
    return figures


def mapping_of(pid: int, path: Path) -> dict[str, int]:
    """Rss and Pss in bytes of process `pid`'s mappings of file `path` (/proc/PID/smaps)."""
    totals = {"Rss": 0, "Pss": 0}
    inside = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            inside = len(fields) == 6 and fields[5] == str(path)
        elif inside and fields[0].rstrip(":") in totals:
            totals[fields[0].rstrip(":")] += int(fields[1]) * 1024
    return totals


def test_the_workers_of_a_model_version_hold_its_weights_once(
    make_spec: Callable[..., ModelSpec], tmp_path: Path
) -> None:
    folder = big_model(tmp_path / "big")
    weights = (folder / "weights.pt").resolve()

    async def main() -> tuple[list[dict[str, int]], list[dict[str, int]], list[Any]]:
        async with Fleet() as fleet:
            spec = make_spec("big", BIG_HANDLER, model_dir=str(folder), handler="handler:Handler")
            pool = fleet.pool(spec)
            assert (await pool.scale(3)).ok  # each loaded the weights and read all of them
            pids = [w.pid or 0 for w in pool.processes]
            figures = [mapping_of(pid, weights) for pid in pids], [rollup(pid) for pid in pids]
            return *figures, [await ask(pool, str(n)) for n in range(3)]

    mapped, rollups, answers = run(main())
    assert len({answer["total"] for answer in answers}) == 1
    assert all(m["Rss"] >= 0.95 * WEIGHTS_BYTES for m in mapped)  # each maps them all
    assert sum(m["Pss"] for m in mapped) <= 1.05 * WEIGHTS_BYTES  # one copy, in 3 shares
    assert all(r["Pss_Anon"] < WEIGHTS_BYTES for r in rollups)  # less than a private copy
