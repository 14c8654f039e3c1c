"""The servers under test, started and stopped alike: jupyter_serve, TorchServe, bare Jupyter,
and a bare tornado echo (the frontend ceiling).

Each `Server` runs in a subprocess on loopback ports, with its log in its own
folder, and offers the same few calls: `start()` (seconds from launch to a
healthy ping), `register(...)` (seconds the register call took), `scale`,
`workers(model)` (its workers' pids and states, from TorchServe's describe
API), `unregister`, `predict_url`, `server_pid`/`worker_pids` for RSS and CPU,
and `stop()` (which leaves nothing running). jupyter_serve's worker factory is
not counted as a worker: its RSS is reported apart (`rss()["factory"]`).

TorchServe 0.12 runs from its own venv `bench/.venv-ts` (`ensure_torchserve_venv`
creates it: torch from the local wheel first, then `torchserve==0.12.0` and
`torch-model-archiver==0.12.0`), with a generated config.properties, token auth
off, the model API on and no config snapshots. Its pid file lives under a
private TMPDIR, so two TorchServe instances (default and OMP_NUM_THREADS=1) can
run side by side.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

BENCH = Path(__file__).resolve().parent
TS_VENV = BENCH / ".venv-ts"
READY_MARK = TS_VENV / ".bench-ready"
TORCH_WHEELS = Path("/opt/wheels")
# What TorchServe's Python worker imports without declaring it (yaml, numpy) or uses (psutil).
TS_EXTRAS = ("pyyaml", "numpy", "psutil")
PIP_LEAKS = ("PYTHONPATH", "PYTHONHOME", "PIP_USER", "PIP_TARGET", "PIP_PREFIX", "VIRTUAL_ENV")
TOKEN = "bench-token"
START_LIMIT = 180.0  # seconds: only a guard against a server that never comes up
POLL = 0.02  # seconds between health pings while a server starts
FACTORY = "jupyter_serve.worker.factory"  # its forked workers keep this command line


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ensure_torchserve_venv(log: Path) -> Path:
    """Create bench/.venv-ts with TorchServe 0.12.0 if it is missing; returns its bin folder."""
    bin_dir = TS_VENV / "bin"
    if READY_MARK.exists():
        return bin_dir
    # pip in the new venv must see only that venv: a PYTHONPATH (pytest-jupyter's, a test's)
    # would show it this venv's packages as installed already and it would skip them
    env = {k: v for k, v in os.environ.items() if k not in PIP_LEAKS}
    with log.open("a") as out:

        def run(*argv: str) -> None:
            subprocess.run(argv, check=True, stdout=out, stderr=out, env=env)

        run(sys.executable, "-m", "venv", str(TS_VENV))
        wheels = sorted(TORCH_WHEELS.glob("torch-2.13.0*.whl"))
        run(str(bin_dir / "pip"), "install", "-q", str(wheels[0]) if wheels else "torch==2.13.0")
        run(
            str(bin_dir / "pip"), "install", "-q",
            "torchserve==0.12.0", "torch-model-archiver==0.12.0", *TS_EXTRAS,
        )  # fmt: skip
        run(str(bin_dir / "python"), "-c", "import torch, ts, model_archiver, yaml, numpy, psutil")
    READY_MARK.touch()
    return bin_dir


def process_rss(pid: int) -> int:
    """The resident size of one process (not its children), in bytes; 0 once it is gone."""
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.NoSuchProcess:
        return 0


def tree_cpu(pids: list[int]) -> float:
    """User + system CPU seconds used so far by these processes."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


class Server:
    """What the runner needs from a server under test."""

    name = "server"
    process: subprocess.Popen[bytes] | None = None

    def __init__(self, folder: Path, store: Path, env: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.store = store
        self.extra_env = env or {}
        folder.mkdir(parents=True, exist_ok=True)
        self.log_path = folder / "server.log"

    # -- what subclasses define -------------------------------------------------
    def launch(self) -> None:
        raise NotImplementedError

    @property
    def ping_url(self) -> str:
        raise NotImplementedError

    def management_url(self, path: str) -> str:
        raise NotImplementedError

    def predict_url(self, model: str) -> str:
        raise NotImplementedError

    @property
    def headers(self) -> dict[str, str]:
        return {}

    @property
    def server_pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def worker_pids(self) -> list[int]:
        try:
            children = psutil.Process(self.server_pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [c.pid for c in children if self._is_worker(c)]

    def _is_worker(self, child: psutil.Process) -> bool:
        raise NotImplementedError

    # -- shared behaviour -------------------------------------------------------
    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.extra_env}

    def start(self) -> float:
        """Launch and wait for a healthy ping; returns the seconds it took."""
        began = time.perf_counter()
        self.launch()
        with httpx.Client(headers=self.headers, timeout=5.0) as client:
            while time.perf_counter() - began < START_LIMIT:
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(self.ping_url).status_code == 200:
                        return time.perf_counter() - began
                self._check_alive()
                time.sleep(POLL)
        raise RuntimeError(f"{self.name} not healthy after {START_LIMIT} s; see {self.log_path}")

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() not in (None, 0):
            raise RuntimeError(f"{self.name} exited; see {self.log_path}")

    def register(self, model: str, batch_size: int, delay_ms: int, workers: int) -> float:
        """Register `model`.mar synchronously; returns the seconds the register call took."""
        params: dict[str, str | int] = {
            "url": f"{model}.mar", "batch_size": batch_size, "max_batch_delay": delay_ms,
            "initial_workers": workers, "synchronous": "true",
        }  # fmt: skip
        began = time.perf_counter()
        with httpx.Client(headers=self.headers, timeout=START_LIMIT) as client:
            answer = client.post(self.management_url("models"), params=params)
            if answer.status_code != 200:
                raise RuntimeError(f"{self.name} register {model}: {answer.text}")
        return time.perf_counter() - began

    def scale(self, model: str, workers: int) -> None:
        """Set `model`'s workers to `workers` (min and max) and wait for the call to finish."""
        params = {"min_worker": workers, "max_worker": workers, "synchronous": "true"}
        with httpx.Client(headers=self.headers, timeout=START_LIMIT) as client:
            answer = client.put(self.management_url(f"models/{model}"), params=params)
            if answer.status_code not in (200, 202):
                raise RuntimeError(f"{self.name} scale {model}: {answer.text}")

    def workers(self, model: str) -> list[tuple[int, str]]:
        """(pid, status) of each worker of `model`, as the describe API lists them."""
        with httpx.Client(headers=self.headers, timeout=START_LIMIT) as client:
            answer = client.get(self.management_url(f"models/{model}"))
            answer.raise_for_status()
        return [(int(w["pid"]), str(w["status"])) for w in answer.json()[0]["workers"]]

    def unregister(self, model: str) -> None:
        with httpx.Client(headers=self.headers, timeout=START_LIMIT) as client:
            answer = client.delete(self.management_url(f"models/{model}"))
            if answer.status_code != 200:
                raise RuntimeError(f"{self.name} unregister {model}: {answer.text}")

    def rss(self) -> dict[str, int | list[int]]:
        return {
            "server": process_rss(self.server_pid),
            "workers": [process_rss(pid) for pid in self.worker_pids()],
        }

    def cpu_seconds(self) -> float:
        return tree_cpu([self.server_pid, *self.worker_pids()])

    def stop(self) -> None:
        if self.process is None:
            return
        workers = self.worker_pids()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        _kill_leftovers(workers)


def _kill_leftovers(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            process = psutil.Process(pid)
            with contextlib.suppress(psutil.TimeoutExpired):
                process.wait(timeout=30)
                continue
            process.kill()


class JupyterServe(Server):
    """`jupyter serve` (this venv's) with a known token and the benchmark's model store."""

    name = "jupyter_serve"

    def __init__(
        self,
        folder: Path,
        store: Path,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        super().__init__(folder, store, env)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/"
        self.args = args  # more `jupyter serve` arguments, e.g. --ServeApp.fork_workers=False

    def argv(self) -> list[str]:
        return [
            str(Path(sys.executable).parent / "jupyter"), "serve",
            f"--port={self.port}", "--ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={self.folder}", f"--ServeApp.workdir={self.folder / 'work'}",
            f"--model-store={self.store}", "--ncs", "--no-browser", *self.args,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        private = {
            name: str(self.folder / suffix)
            for name, suffix in (
                ("JUPYTER_CONFIG_DIR", ".jupyter-config"),
                ("JUPYTER_DATA_DIR", ".jupyter-data"),
                ("JUPYTER_RUNTIME_DIR", ".jupyter-runtime"),
            )
        }
        return {**super().environment(), **private}

    def launch(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv(), cwd=self.folder, env=self.environment(),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )  # fmt: skip

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {TOKEN}"}

    @property
    def ping_url(self) -> str:
        return f"{self.base}serve/ping"

    def management_url(self, path: str) -> str:
        return f"{self.base}serve/{path}"

    def predict_url(self, model: str) -> str:
        return f"{self.base}serve/predictions/{model}"

    def _is_worker(self, child: psutil.Process) -> bool:
        return "jupyter_serve.worker" in _command(child) and child.pid not in self.factory_pids()

    def factory_pids(self) -> list[int]:
        """The worker factory: the server's child running it (its workers are its children)."""
        try:
            children = psutil.Process(self.server_pid).children()
        except psutil.NoSuchProcess:
            return []
        return [c.pid for c in children if FACTORY in _command(c)]

    def rss(self) -> dict[str, int | list[int]]:
        return {**super().rss(), "factory": [process_rss(pid) for pid in self.factory_pids()]}


def _command(process: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return " ".join(process.cmdline())
    return ""


class BareJupyter(JupyterServe):
    """The same Jupyter server with jupyter_serve disabled: the RSS jupyter_serve adds to."""

    name = "jupyter_server"

    def argv(self) -> list[str]:
        return [
            str(Path(sys.executable).parent / "jupyter"), "server", "--allow-root",
            f"--port={self.port}", "--ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={self.folder}", "--no-browser",
            "--ServerApp.jpserver_extensions={'jupyter_serve': False}",
        ]  # fmt: skip

    @property
    def ping_url(self) -> str:
        return f"{self.base}api/status"


class BareTornado(Server):
    """bench/ceiling.py: tornado echoing each POST body, the ceiling of a tornado frontend."""

    name = "tornado_ceiling"

    def __init__(self, folder: Path, store: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(folder, store, env)
        self.port = free_port()

    def launch(self) -> None:
        argv = [sys.executable, str(BENCH / "ceiling.py"), str(self.port)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.environment()
            )

    @property
    def ping_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/ping"

    def predict_url(self, model: str) -> str:
        return f"http://127.0.0.1:{self.port}/predictions/{model}"

    def _is_worker(self, child: psutil.Process) -> bool:
        return False

    def register(self, model: str, batch_size: int, delay_ms: int, workers: int) -> float:
        return 0.0  # nothing to register: it echoes on every path

    def unregister(self, model: str) -> None:
        return None


class TorchServe(Server):
    """TorchServe 0.12.0 from bench/.venv-ts, on three loopback ports."""

    name = "torchserve"

    def __init__(
        self, folder: Path, store: Path, bin_dir: Path, env: dict[str, str] | None = None
    ) -> None:
        super().__init__(folder, store, env)
        self.bin_dir = bin_dir
        self.ports = {kind: free_port() for kind in ("inference", "management", "metrics")}
        self.java_pid: int | None = None

    def write_config(self) -> Path:
        lines = [f"{kind}_address=http://127.0.0.1:{port}" for kind, port in self.ports.items()]
        lines += ["metrics_mode=prometheus", f"model_store={self.store}"]
        # gRPC would bind 7070/7071 on every instance: give each its own free ports.
        lines += [f"grpc_{kind}_port={free_port()}" for kind in ("inference", "management")]
        # The frontend's worker sockets live in java.io.tmpdir: a private one per instance.
        lines.append(f"vmargs=-Djava.io.tmpdir={self.folder / 'tmp'}")
        (self.folder / "tmp").mkdir(exist_ok=True)
        config = self.folder / "config.properties"
        config.write_text("\n".join(lines) + "\n")
        return config

    def environment(self) -> dict[str, str]:
        tmp = self.folder / "tmp"
        tmp.mkdir(exist_ok=True)
        env = {**super().environment(), "TMPDIR": str(tmp)}
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env.pop("PYTHONPATH", None)
        return env

    def _torchserve(self, *args: str) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as log:
            return subprocess.Popen(
                [str(self.bin_dir / "torchserve"), *args], cwd=self.folder,
                env=self.environment(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )  # fmt: skip

    def launch(self) -> None:
        config = self.write_config()
        self.process = self._torchserve(
            "--start", "--ncs", "--disable-token-auth", "--enable-model-api",
            "--model-store", str(self.store), "--ts-config", str(config),
        )  # fmt: skip

    def _check_alive(self) -> None:
        """`torchserve --start` exits once java is launched; java must stay up."""
        if self.process is not None and self.process.poll() not in (None, 0):
            raise RuntimeError(f"torchserve --start failed; see {self.log_path}")

    @property
    def server_pid(self) -> int:
        if self.java_pid is None:
            pid_file = self.folder / "tmp" / ".model_server.pid"
            self.java_pid = int(pid_file.read_text().strip())
        return self.java_pid

    @property
    def ping_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['inference']}/ping"

    def management_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.ports['management']}/{path}"

    def predict_url(self, model: str) -> str:
        return f"http://127.0.0.1:{self.ports['inference']}/predictions/{model}"

    def _is_worker(self, child: psutil.Process) -> bool:
        with contextlib.suppress(psutil.Error):
            return "model_service_worker" in " ".join(child.cmdline())
        return False

    def stop(self) -> None:
        if self.process is None:
            return
        try:
            pids = [self.server_pid, *self.worker_pids()]
        except (OSError, ValueError):
            pids = []
        stopper = self._torchserve("--stop")
        stopper.wait(timeout=120)
        _kill_leftovers(pids)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def java_available() -> bool:
    return shutil.which("java") is not None
