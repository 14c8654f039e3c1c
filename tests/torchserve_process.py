"""Real TorchServe 0.12 for tests: its venv (bench/servers.py makes it), one process per test.

`torchserve_bin()` returns the venv's bin folder, creating `bench/.venv-ts` the way the
benchmark does (`ensure_torchserve_venv`, loaded from bench/servers.py) when it is
missing. `skip_reason()` says why this machine cannot run it: a developer sets
`JUPYTER_SERVE_SKIP_TORCHSERVE=1` (or has no Java) to skip it; with `CI=true` it always
runs, and a missing Java fails instead (scripts/test installs openjdk-17-jre-headless).

`TorchServeProcess(folder, bin)` runs `torchserve --start --foreground` with everything
private to `folder` (cwd, logs, TEMP and TMPDIR, so two TorchServes never share worker
sockets or pid files) and the `TS_*` environment overrides a test gives (addresses on
loopback ports); its console is read in a thread so a test waits on a log line
(`wait_for`) instead of polling. `stop()` runs `torchserve --stop` and kills what is
left; call it in `finally`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import psutil
from followed_lines import FollowedLines

ROOT = Path(__file__).resolve().parent.parent
SKIP_ENV = "JUPYTER_SERVE_SKIP_TORCHSERVE"
WAIT = 300.0  # seconds; only a guard against a TorchServe that never logs the line


def bench_servers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_servers", ROOT / "bench" / "servers.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def skip_reason() -> str | None:
    """Why not to run TorchServe here, or None (always None with CI=true)."""
    if os.environ.get("CI") == "true":
        return None
    if os.environ.get(SKIP_ENV) == "1":
        return f"{SKIP_ENV}=1"
    if shutil.which("java") is None:
        return "no java (apt-get install openjdk-17-jre-headless)"
    return None


def torchserve_bin(log: Path) -> Path:
    """bench/.venv-ts/bin, created first if needed (about two minutes)."""
    bin_dir: Path = bench_servers().ensure_torchserve_venv(log)
    return bin_dir


def free_port() -> int:
    port: int = bench_servers().free_port()
    return port


class TorchServeProcess:
    """`torchserve --start --foreground` on a model store and a config.properties."""

    def __init__(self, folder: Path, bin_dir: Path, args: list[str], env: dict[str, str]) -> None:
        self.folder, self.bin_dir = folder, bin_dir
        tmp = folder / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("TS_")}, **env,
                    "TEMP": str(tmp), "TMPDIR": str(tmp), "LOG_LOCATION": str(folder / "logs"),
                    "METRICS_LOCATION": str(folder / "logs"),
                    "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
        self.env.pop("PYTHONPATH", None)
        command = [str(bin_dir / "torchserve"), "--start", "--foreground", "--ncs", *args]
        self.process = subprocess.Popen(
            command, cwd=folder, env=self.env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.console = FollowedLines(self.process.stdout)

    def log(self) -> str:
        return self.console.text()

    def wait_for(self, text: str, count: int = 1) -> None:
        """Block until `count` lines contain `text`; fail if TorchServe exits first."""
        found = self.console.wait_for(text, count, WAIT)
        assert found >= count, f"TorchServe never logged {text!r} {count} times:\n{self.log()}"

    def stop(self) -> None:
        """`torchserve --stop`, then kill whatever is left (java and its workers)."""
        try:
            family = [self.process.pid, *self._children()]
        except psutil.Error:
            family = []
        subprocess.run(
            [str(self.bin_dir / "torchserve"), "--stop", "--foreground"], cwd=self.folder,
            env=self.env, stdin=subprocess.DEVNULL, capture_output=True, timeout=WAIT,
        )  # fmt: skip
        for pid in family:
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                with contextlib.suppress(psutil.TimeoutExpired):
                    process.wait(timeout=60)
                    continue
                process.kill()
        self.process.wait(timeout=WAIT)
        self.console.close(WAIT)

    def _children(self) -> list[int]:
        return [child.pid for child in psutil.Process(self.process.pid).children(recursive=True)]


class Ports(NamedTuple):
    inference: int
    management: int


def on_export(dest: Path, work: Path, bin_dir: Path) -> tuple[TorchServeProcess, Ports]:
    """TorchServe started on `jupyter serve export`'s folder `dest` as KServe would start
    it (its model store and config.properties), only its addresses moved to free ports."""
    ports = Ports(free_port(), free_port())
    env = {
        "TS_INFERENCE_ADDRESS": f"http://127.0.0.1:{ports.inference}",
        "TS_MANAGEMENT_ADDRESS": f"http://127.0.0.1:{ports.management}",
        "TS_METRICS_ADDRESS": f"http://127.0.0.1:{free_port()}",
        "TS_GRPC_INFERENCE_PORT": str(free_port()),
        "TS_GRPC_MANAGEMENT_PORT": str(free_port()),
    }
    args = ["--model-store", str(dest / "model-store"),
            "--ts-config", str(dest / "config" / "config.properties")]  # fmt: skip
    return TorchServeProcess(work, bin_dir, args, env), ports
