"""The cores a server may use (affinity within a cgroup quota) and each worker's threads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_serve.server.pool import cores
from jupyter_serve.server.pool.cores import cgroup_cpu_limit, cpu_threads_per_worker


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def test_workers_share_the_cores() -> None:
    assert cpu_threads_per_worker(1, cores=2) == 2
    assert cpu_threads_per_worker(2, cores=4) == 2
    assert cpu_threads_per_worker(3, cores=2) == 1  # never fewer than one


def test_a_continuously_batching_model_leaves_a_core_to_the_server() -> None:
    assert cpu_threads_per_worker(1, cores=2, streaming=True) == 1
    assert cpu_threads_per_worker(1, cores=8, streaming=True) == 7
    assert cpu_threads_per_worker(2, cores=9, streaming=True) == 4
    assert cpu_threads_per_worker(1, cores=1, streaming=True) == 1  # one core: kept


def test_cgroup_v2_quota_in_whole_cores_rounded_up(tmp_path: Path) -> None:
    write(tmp_path / "user.slice" / "pod" / "cpu.max", "150000 100000")
    assert cgroup_cpu_limit(tmp_path, {"": "/user.slice/pod"}) == 2


def test_cgroup_v2_quota_on_an_ancestor_counts(tmp_path: Path) -> None:
    write(tmp_path / "user.slice" / "cpu.max", "100000 100000")
    write(tmp_path / "user.slice" / "pod" / "cpu.max", "max 100000")
    assert cgroup_cpu_limit(tmp_path, {"": "/user.slice/pod"}) == 1


def test_no_quota_is_no_limit(tmp_path: Path) -> None:
    write(tmp_path / "cpu.max", "max 100000")
    write(tmp_path / "cpu" / "cpu.cfs_quota_us", "-1")
    write(tmp_path / "cpu" / "cpu.cfs_period_us", "100000")
    assert cgroup_cpu_limit(tmp_path, {"": "/", "cpu": "/"}) is None
    assert cgroup_cpu_limit(tmp_path / "missing", {"": "/a", "cpu": "/a"}) is None


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    write(tmp_path / "cpu" / "docker" / "c1" / "cpu.cfs_quota_us", "50000")
    write(tmp_path / "cpu" / "docker" / "c1" / "cpu.cfs_period_us", "100000")
    assert cgroup_cpu_limit(tmp_path, {"cpu": "/docker/c1", "cpuacct": "/docker/c1"}) == 1


def test_malformed_files_are_no_limit(tmp_path: Path) -> None:
    write(tmp_path / "cpu.max", "lots 0")
    write(tmp_path / "cpu" / "cpu.cfs_quota_us", "many")
    write(tmp_path / "cpu" / "cpu.cfs_period_us", "0")
    assert cgroup_cpu_limit(tmp_path, {"": "/", "cpu": "/../.."}) is None


def test_available_cores_is_the_affinity_within_the_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    affinity = len(os.sched_getaffinity(0))
    monkeypatch.setattr(cores, "CGROUP_ROOT", tmp_path / "none")
    assert cores.available_cores() == affinity
    # a quota at the root of both hierarchies is an ancestor of whatever cgroup this is in
    write(tmp_path / "q" / "cpu.max", "100000 100000")
    write(tmp_path / "q" / "cpu" / "cpu.cfs_quota_us", "100000")
    write(tmp_path / "q" / "cpu" / "cpu.cfs_period_us", "100000")
    monkeypatch.setattr(cores, "CGROUP_ROOT", tmp_path / "q")
    assert cores.available_cores() == 1
