"""A real JupyterHub 6 on loopback: configurable-http-proxy, SimpleLocalProcessSpawner and
single-user servers of this venv (so running jupyter_serve), for bench/hub.py and the
end-to-end tests (tests/hub_process.py imports this module).

`Hub` writes a `jupyterhub_config.py` into its folder (database, cookie secret, proxy
token and pid files all live there), starts `jupyterhub` with free ports, and waits on
its log for "JupyterHub is now running" (a reader thread, no polling). A service
(`tester`, token `SERVICE_TOKEN`; the caller grants it a role) may create tokens and
start servers; `spawn` starts a user's server through the hub API and waits on the
hub's progress event stream until the hub says it is ready (the stream ends there, or
with a failure, or at the hub's own spawn timeout). `stop` ends the hub, which stops the
proxy and the servers it spawned; anything still running after it is killed.

`available()` says why a hub cannot run here (no `configurable-http-proxy`, no
jupyterhub), or None.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx
import psutil
from servers import free_port

SERVICE_TOKEN = "hub-e2e-service-token"
RUNNING = "JupyterHub is now running at"
WAIT = 120.0  # seconds: only a guard against a hub or server that never gets there
PROXY = "configurable-http-proxy"


def available() -> str | None:
    """Why a real hub cannot run here, or None."""
    if importlib.util.find_spec("jupyterhub") is None:
        return "jupyterhub is not installed (pip install -e '.[test]')"
    if shutil.which(PROXY) is None:
        return f"{PROXY} is not on PATH (npm install -g {PROXY}@5; scripts/test does)"
    return None


def _config(folder: Path, ports: Mapping[str, int], hub: Mapping[str, Any]) -> str:
    """The hub's config: loopback, the given ports, everything kept in `folder`; `hub`
    adds `c.<Class>.<trait> = value` settings (values Python literals can spell)."""
    singleuser = Path(sys.executable).with_name("jupyterhub-singleuser")
    settings: dict[str, Any] = {
        "JupyterHub.ip": "127.0.0.1",
        "JupyterHub.port": ports["public"],
        "JupyterHub.hub_ip": "127.0.0.1",
        "JupyterHub.hub_port": ports["hub"],
        "JupyterHub.db_url": f"sqlite:///{folder / 'jupyterhub.sqlite'}",
        "JupyterHub.cookie_secret_file": str(folder / "cookie_secret"),
        "JupyterHub.pid_file": str(folder / "jupyterhub.pid"),
        "JupyterHub.spawner_class": "simple",
        "JupyterHub.services": [{"name": "tester", "api_token": SERVICE_TOKEN}],
        "ConfigurableHTTPProxy.command": [str(shutil.which(PROXY))],
        "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{ports['proxy_api']}",
        "ConfigurableHTTPProxy.auth_token": os.urandom(16).hex(),
        "ConfigurableHTTPProxy.pid_file": str(folder / "proxy.pid"),
        "SimpleLocalProcessSpawner.home_dir_template": str(folder / "home" / "{username}"),
        "Spawner.cmd": [str(singleuser)],
        "Spawner.ip": "127.0.0.1",
        **hub,
    }
    lines = [f"c.{name} = {value!r}" for name, value in settings.items()]
    return "\n".join(["c = get_config()  # noqa", *lines]) + "\n"


class _Log(threading.Thread):
    """The hub's stderr, read line by line; `running` is set at RUNNING or at its end."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(daemon=True)
        self.stream, self.lines, self.running = stream, list[str](), threading.Event()
        self.start()

    def run(self) -> None:
        for line in self.stream:
            self.lines.append(line.rstrip("\n"))
            if RUNNING in line:
                self.running.set()
        self.running.set()


class Hub:
    """One `jupyterhub` subprocess (and, through it, the proxy and single-user servers)."""

    def __init__(self, folder: Path, hub: Mapping[str, Any]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        secret = folder / "cookie_secret"
        secret.write_text(os.urandom(32).hex())
        secret.chmod(0o600)
        ports = {"public": free_port(), "hub": free_port(), "proxy_api": free_port()}
        (folder / "jupyterhub_config.py").write_text(_config(folder, ports, hub))
        self.url = f"http://127.0.0.1:{ports['public']}"
        hub_bin = Path(sys.executable).with_name("jupyterhub")
        self.process = subprocess.Popen(
            [str(hub_bin), "-f", str(folder / "jupyterhub_config.py")],
            cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PATH": f"{hub_bin.parent}{os.pathsep}{os.environ['PATH']}"},
        )  # fmt: skip
        assert self.process.stderr is not None
        self._log = _Log(self.process.stderr)

    def log(self) -> str:
        return "\n".join(self._log.lines)

    def start(self) -> Hub:
        """Wait until the hub says it is running (its proxy is up then)."""
        self._log.running.wait(WAIT)
        assert any(RUNNING in line for line in self._log.lines), f"no hub:\n{self.log()}"
        return self

    def client(self, token: str | None = None) -> httpx.Client:
        """A client of the proxy's public address, with `token` (a hub token) if given."""
        headers = {"Authorization": f"token {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=WAIT)

    def api(self, method: str, path: str, **kw: Any) -> Any:
        """A hub API call as the service; the JSON answer (2xx required)."""
        with self.client(SERVICE_TOKEN) as client:
            answer = client.request(method, f"/hub/api/{path}", **kw)
        assert answer.is_success, (method, path, answer.status_code, answer.text)
        return answer.json() if answer.content else None

    def token(self, user: str) -> str:
        """A new API token of `user`, with every permission the user has."""
        made = self.api("POST", f"users/{user}/tokens", json={"note": "jupyter_serve"})
        return str(made["token"])

    def spawn(self, user: str) -> None:
        """Start `user`'s default server and wait on the hub's progress events until it is
        ready (the hub has then checked it answers and routed the proxy to it)."""
        self.api("POST", f"users/{user}/server")
        events = []
        with (
            self.client(SERVICE_TOKEN) as client,
            client.stream("GET", f"/hub/api/users/{user}/server/progress") as stream,
        ):
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                events.append(json.loads(line.removeprefix("data:")))
                if events[-1].get("ready") or events[-1].get("failed"):
                    break
        assert events, self.log()
        assert events[-1].get("ready"), f"{events}\n{self.log()}"

    def stop(self) -> None:
        """Stop the hub (it stops its proxy and servers), then kill whatever outlived it."""
        children = self._descendants()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=WAIT)
        self._log.join(WAIT)
        if self.process.stderr is not None:
            self.process.stderr.close()
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()

    def _descendants(self) -> Sequence[psutil.Process]:
        with contextlib.suppress(psutil.NoSuchProcess):
            children: list[psutil.Process] = psutil.Process(self.process.pid).children(True)
            return children
        return []
