"""The hub part: echo predictions/s under JupyterHub, against the token fast path outside one.

Under a hub the serve lane answers a hub token's predictions once the hub has admitted
the token (server/http/hub_verdicts.py), as it answers the server's own token outside a
hub. This part measures both side by side on the machine, each warmed up, then measured
in turn (closed loop, bench/loadgen.py, at concurrency 1 and 32, repeats interleaved):

* `token_lane`: `jupyter serve` with its own token (bench/servers.py), the fast path;
* `hub_proxy`: a single-user server spawned by a real JupyterHub 6
  (bench/hub_launcher.py: configurable-http-proxy, SimpleLocalProcessSpawner,
  `HubScopesAuthorizer` as the README recommends), reached through the proxy with its
  owner's hub token, as a client outside the hub would;
* `hub_direct`: the same single-user server at its own port with the same token (no
  proxy): the full route alone.

All three serve bench/workloads.py's `echo` with the same configuration (`CONFIG`).
`run(...)` returns the points; `summarize` in bench/report.py takes their medians and
`ratios` their quotients (`hub_direct_rps_vs_token_lane`, `hub_proxy_rps_vs_token_lane`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import loadgen
import psutil
import servers
import workloads
from hub_launcher import Hub

MODEL = "echo"
CONFIG = ("batch8-5ms/1w", 8, 5, 1)  # label, batch size, max batch delay (ms), workers
USER = "ann"
LANE, PROXY, DIRECT = "token_lane", "hub_proxy", "hub_direct"
SINGLEUSER = "jupyterhub-singleuser"
CONCURRENCIES = (1, 32)
TESTER = ["admin:users", "admin:servers", "tokens", "read:servers"]  # makes tokens, spawns

Measure = Callable[[servers.Server, loadgen.Target, int, float], dict[str, Any]]


class SingleUser(servers.Server):
    """A hub-spawned single-user server, reached at `base` with `USER`'s hub token."""

    name = "jupyterhub-singleuser"

    def __init__(self, hub: Hub, base: str, token: str) -> None:
        super().__init__(hub.folder / "singleuser", hub.folder / "store")
        self.hub, self.base, self.token = hub, base, token

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def management_url(self, path: str) -> str:
        return f"{self.base}/user/{USER}/serve/{path}"

    def predict_url(self, model: str) -> str:
        return self.management_url(f"predictions/{model}")

    @property
    def server_pid(self) -> int:
        hub = psutil.Process(self.hub.process.pid)
        found = [int(p.pid) for p in hub.children(True) if SINGLEUSER in " ".join(p.cmdline())]
        assert len(found) == 1, found
        return found[0]

    def _is_worker(self, child: psutil.Process) -> bool:
        return "jupyter_serve.worker" in " ".join(child.cmdline())


def hub_settings(folder: Path, store: Path, port: int) -> dict[str, Any]:
    """One user (`USER`, any password) whose server listens on `port` and serves `store`."""
    return {
        "Authenticator.allowed_users": {USER},
        "JupyterHub.authenticator_class": "dummy",
        "JupyterHub.load_roles": [{"name": "tester", "services": ["tester"], "scopes": TESTER}],
        "Spawner.port": port,
        "Spawner.args": [
            "--allow-root",  # these machines and CI run as root
            "--ServerApp.authorizer_class=jupyter_serve.hub.HubScopesAuthorizer",
            f"--ServeApp.model_store={store}",
            f"--ServeApp.workdir={folder / 'work'}",
            "--ServeApp.snapshots=False",
        ],
    }


class HubPart:
    """The three servers up side by side, then every point in turn."""

    def __init__(self, work: Path, store: Path, log: Callable[[str], None]) -> None:
        self.work, self.store, self.log = work, store, log
        self.servers: dict[str, servers.Server] = {}
        self.hub: Hub | None = None

    def start(self) -> None:
        lane = servers.JupyterServe(self.work / "lane", self.store)
        self.servers[LANE] = lane
        lane.start()
        port = servers.free_port()
        folder = self.work / "hub"
        self.hub = hub = Hub(folder, hub_settings(folder, self.store, port))
        hub.start().spawn(USER)
        token = hub.token(USER)
        self.servers[PROXY] = SingleUser(hub, hub.url, token)
        self.servers[DIRECT] = SingleUser(hub, f"http://127.0.0.1:{port}", token)
        self.log(f"hub up at {hub.url}, {USER}'s server at port {port}")

    def stop(self) -> None:
        if LANE in self.servers:
            self.servers[LANE].stop()
        if self.hub is not None:
            self.hub.stop()

    def register(self, first_prediction: Callable[[loadgen.Target], None]) -> None:
        """Register echo once on each server (PROXY and DIRECT are the same server)."""
        _, batch, delay, workers = CONFIG
        for name in (LANE, PROXY):
            self.servers[name].register(MODEL, batch, delay, workers)
        for name in self.servers:
            first_prediction(self.target(name))

    def target(self, name: str) -> loadgen.Target:
        server, load = self.servers[name], workloads.workloads()[MODEL]
        headers = tuple(server.headers.items())
        return loadgen.Target(
            server.predict_url(MODEL), load.body, load.content_type, headers, load.check
        )


def run(work: Path, store: Path, plan: Any, measure: Measure,
        first_prediction: Callable[[loadgen.Target], None],
        log: Callable[[str], None]) -> list[dict[str, Any]]:  # fmt: skip
    """Every point of the hub part: `plan` is bench/run.py's `Plan` (concurrencies,
    repeats, seconds, warm-up), `measure` its one-point measurement."""
    part, points = HubPart(work, store, log), []
    try:
        part.start()
        part.register(first_prediction)
        loads = {name: part.target(name) for name in part.servers}
        for name, server in part.servers.items():
            measure(server, loads[name], 8, plan.warm_seconds)
        order = list(part.servers)
        for concurrency in CONCURRENCIES:
            for repeat in range(plan.repeats):
                for name in order[repeat % 3 :] + order[: repeat % 3]:
                    point = measure(part.servers[name], loads[name], concurrency, plan.seconds)
                    labels = {"server": name, "model": MODEL, "config": CONFIG[0]}
                    points.append({**labels, "concurrency": concurrency, **point})
                    log(f"{name} {MODEL} c{concurrency}: {point['rps']} req/s, "
                        f"p50 {point['p50_ms']} ms, errors {point['errors']}")  # fmt: skip
    finally:
        part.stop()
    return points
