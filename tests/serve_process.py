"""`jupyter serve` in a subprocess for end-to-end tests: start it, wait on its log, stop it.

`ServeProcess` runs the installed `jupyter serve` with a free port, a known token
and a private workdir/root, reads its stderr in a thread, and lets tests block
until a log line appears (`wait_for`) instead of polling. `client()` is an httpx
client for `{url}serve/` with the token. `worker_pids()` lists the server's
worker processes (descendants running `jupyter_serve.worker`: fresh workers, the
worker factory and the workers it forked, which keep its command line),
`factory_pids()` the factory itself. Worker and factory output (the
`jupyter_serve.worker` logger) goes to the server's stderr, where `ServeApp` shows
it by default, so tests can wait on events such as "Worker factory ready".
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil
from followed_lines import FollowedLines

TOKEN = "e2e-secret-token"
STARTED = "is running at"  # jupyter_server's line once it listens
MODELS_UP = "startup models serving"  # ServeApp's line once startup models serve
WAIT = 120.0  # seconds; only a guard against a server that never logs the line


def jupyter_command() -> list[str]:
    """`jupyter` of this environment (the venv's `bin/jupyter`)."""
    local = Path(sys.executable).parent / "jupyter"
    return [str(local)] if local.exists() else [shutil.which("jupyter") or "jupyter"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServeProcess:
    """One `jupyter serve` subprocess."""

    def __init__(
        self,
        root: Path,
        args: Sequence[str] = (),
        workdir: Path | None = None,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`command` runs the server (default: this environment's `jupyter serve`; the
        panel's tests run `jupyter lab`, the Binder check `binder/start jupyter lab` of
        another environment); `env` adds variables to this process's."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        argv = [
            *(command or [*jupyter_command(), "serve"]),
            f"--port={self.port}",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            f"--ServeApp.workdir={workdir or root / 'work'}",
            "--no-browser",
            *args,
        ]
        config_dir = root / ".jupyter-config"  # no user config; worker output is logged anyway
        config_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(config_dir),
            "JUPYTER_DATA_DIR": str(root / ".jupyter-data"),
            "JUPYTER_RUNTIME_DIR": str(root / ".jupyter-runtime"),
            **(env or {}),
        }
        self.process = subprocess.Popen(
            argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        assert self.process.stderr is not None
        self.stderr = FollowedLines(self.process.stderr)

    @property
    def lines(self) -> list[str]:
        return self.stderr.lines

    def log(self) -> str:
        return self.stderr.text()

    def wait_for(self, text: str, count: int = 1) -> None:
        """Block until `count` log lines contain `text`; fail if the server exits first."""
        found = self.stderr.wait_for(text, count, WAIT)
        assert found >= count, f"server never logged {text!r}:\n{self.log()}"

    def start(self, *, models: int = 0) -> ServeProcess:
        """Wait until the server listens and jupyter_serve has started (`models`: how many
        startup lines to wait for). The extension starts after jupyter_server wrote its
        runtime file, which "is running at" precedes, so kernels can find the server."""
        self.wait_for(STARTED)
        self.wait_for(MODELS_UP, max(models, 1))
        return self

    def client(self, **kw: Any) -> httpx.Client:
        headers = {"Authorization": f"token {TOKEN}"}
        return httpx.Client(base_url=f"{self.url}serve/", headers=headers, timeout=WAIT, **kw)

    def worker_pids(self) -> list[int]:
        """Worker processes, forked or fresh, and the worker factory."""
        return self._descendants("jupyter_serve.worker", recursive=True)

    def factory_pids(self) -> list[int]:
        """The worker factory (its forked workers are its children, not the server's)."""
        return self._descendants("jupyter_serve.worker.factory", recursive=False)

    def _descendants(self, marker: str, *, recursive: bool) -> list[int]:
        children = psutil.Process(self.process.pid).children(recursive=recursive)
        return sorted(c.pid for c in children if marker in " ".join(c.cmdline()))

    def send(self, signum: int = signal.SIGINT) -> None:
        self.process.send_signal(signum)

    def stop(self, signum: int = signal.SIGINT) -> int:
        """Signal the server and wait for it to exit; returns its exit code."""
        if self.process.poll() is None:
            self.send(signum)
        code = self.process.wait(timeout=WAIT)
        self._close()
        return code

    def _close(self) -> None:
        self.stderr.close(WAIT)

    def kill(self) -> None:
        """Last resort for a test that failed half-way: nothing may outlive the test."""
        pids = self.worker_pids() if self.process.poll() is None else []
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=WAIT)
        self._close()
        for pid in pids:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()


def still_running_after(pids: Sequence[int], timeout: float) -> list[int]:
    """The `pids` that have not exited within `timeout` seconds (waited for on pidfds,
    which become readable when the process exits: no polling)."""
    watched: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            watched[os.pidfd_open(pid)] = pid
    deadline = time.monotonic() + timeout
    pending = set(watched)
    try:
        while pending and (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(list(pending), [], [], left)
            pending -= set(ready)
    finally:
        for fd in watched:
            os.close(fd)
    return sorted(watched[fd] for fd in pending)


def alive(pids: Sequence[int]) -> list[int]:
    """The pids still running (zombies count as gone)."""
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            continue
    return running
