"""The stall probe: how long Jupyter's own `/api/status` waits while serve routes take worst cases.

jupyter_serve shares the Jupyter server's one event loop with the user's kernels,
files and terminals, so no request to `serve/` may hold that loop for long,
whatever its size or shape. The probe sends each worst case below with an
inference key (the log reads with the token, as the Log tab does) while a thread
polls `GET /api/status` back to back on its own connection, and keeps the longest
answer seen during the case. It does the same against a bare Jupyter server (no
jupyter_serve: the same bytes answered 404), whose longest answer is the floor
of the machine and of the probe itself.

Cases (each bounded by `CASE_LIMIT` seconds; one that is not answered in time is
reported as such):

* `v2_shape_amplification`: an 82-byte v2 request whose shape `[4000000, 0]`
  describes no data;
* `v2_binary_bool_x6`: six concurrent 6.4 MB v2 requests, one BOOL input in the
  binary tensor extension (6.4 million elements each);
* `v2_json_6mb`: one 6.4 MB v2 request in JSON (3.2 million INT32 zeros);
* `v1_instances_500k` and `v1_instances_6mb`: a v1 request of 500,000 (1 MB) and of
  3.2 million (6.4 MB) instances;
* `worker_logs`: 150 predictions of 900 KB to a handler that prints its input,
  then three reads of `serve/logs/loud`;
* `bare_lf`: a whole request whose lines end in a bare LF.

`stall_ms` lists, per case, jupyter_serve's longest `/api/status` answer minus the
bare server's longest under the same case; `stall_ms_worst` (in run.py's `ratios`) is
the largest of them: what the worst request adds to a Jupyter server's own stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import servers
from workloads import HANDLERS

from jupyter_serve.archive import ArchiveSpec, build_mar

CASE_LIMIT = 120.0  # seconds a case may take before it counts as not answered
SETTLE = 0.3  # seconds the poller runs before and after each case
BINARY_ELEMENTS = 6_400_000
JSON_ELEMENTS = 3_200_000
LOG_REQUESTS, LOG_BYTES = 150, 900_000

Send = Callable[["Prober"], Awaitable[list[int]]]


class StatusPoller(threading.Thread):
    """Polls `/api/status` back to back on one connection; `longest_ms` since `reset`."""

    def __init__(self, base: str, token: str) -> None:
        super().__init__(daemon=True)
        self.url, self.headers = f"{base}api/status", {"Authorization": f"token {token}"}
        self.done = threading.Event()
        self.longest_ms = 0.0

    def run(self) -> None:
        with httpx.Client(headers=self.headers, timeout=CASE_LIMIT) as client:
            while not self.done.is_set():
                began = time.perf_counter()
                with contextlib.suppress(httpx.HTTPError):
                    client.get(self.url)
                self.longest_ms = max(self.longest_ms, (time.perf_counter() - began) * 1000)

    def reset(self) -> None:
        self.longest_ms = 0.0


class Prober:
    """Sends the cases to one server: `base` URL, the key for predictions, the token."""

    def __init__(self, base: str, key: str, token: str) -> None:
        self.base, self.key, self.token = base, key, token

    async def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> int:
        async with httpx.AsyncClient(timeout=CASE_LIMIT) as client:
            answer = await client.post(f"{self.base}serve/{path}", content=body, headers={
                "Authorization": f"Bearer {self.key}", **(headers or {})})  # fmt: skip
            return answer.status_code

    async def read_logs(self, model: str) -> int:
        async with httpx.AsyncClient(timeout=CASE_LIMIT) as client:
            answer = await client.get(f"{self.base}serve/logs/{model}",
                                      headers={"Authorization": f"token {self.token}"})  # fmt: skip
            return answer.status_code

    async def raw(self, data: bytes) -> int:
        """Send `data` on a fresh connection; the answer's status, or 0 if none came."""
        host, port = self.base.split("//", 1)[1].rstrip("/").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(data)
            line = await asyncio.wait_for(reader.readline(), CASE_LIMIT)
            return int(line.split()[1]) if line.startswith(b"HTTP/") else 0
        except asyncio.TimeoutError:
            return 0
        finally:
            writer.close()


def _v2_json(shape: list[int], datatype: str, data: str) -> bytes:
    tensor = {"name": "x", "shape": shape, "datatype": datatype, "data": "DATA"}
    return json.dumps({"inputs": [tensor]}).replace('"DATA"', f"[{data}]").encode()


def _binary_bool() -> tuple[bytes, str]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [BINARY_ELEMENTS],
                    "datatype": "BOOL",
                    "parameters": {"binary_data_size": BINARY_ELEMENTS},
                }
            ]
        }
    )
    head = header.encode()  # fmt: skip
    return head + b"\x01" * BINARY_ELEMENTS, str(len(head))


def _instances(count: int) -> bytes:
    return b'{"instances":[' + b",".join([b"0"] * count) + b"]}"


def cases() -> dict[str, Send]:
    """Each case: the coroutine that sends it and returns the answers' statuses."""
    shape = _v2_json([4_000_000, 0], "FP32", "")
    v2_json = _v2_json([JSON_ELEMENTS], "INT32", ",".join(["0"] * JSON_ELEMENTS))
    binary, header_length = _binary_bool()
    small, large = _instances(500_000), _instances(JSON_ELEMENTS)
    infer = "v2/models/echo/infer"
    json_type = {"Content-Type": "application/json"}
    binary_type = {"Content-Type": "application/octet-stream",
                   "Inference-Header-Content-Length": header_length}  # fmt: skip

    async def binary_x6(p: Prober) -> list[int]:
        return list(await asyncio.gather(*(p.post(infer, binary, binary_type) for _ in range(6))))

    async def logs(p: Prober) -> list[int]:
        line = b"a" * LOG_BYTES
        sent = [await p.post("predictions/loud", line) for _ in range(LOG_REQUESTS)]
        return sent + [await p.read_logs("loud") for _ in range(3)]

    async def bare_lf(p: Prober) -> list[int]:
        head = (f"GET /serve/predictions/echo HTTP/1.1\nHost: localhost\n"
                f"Authorization: Bearer {p.key}\nConnection: close\n\n")  # fmt: skip
        return [await p.raw(head.encode())]

    return {
        "v2_shape_amplification": lambda p: _one(p.post(infer, shape, json_type)),
        "v2_binary_bool_x6": binary_x6,
        "v2_json_6mb": lambda p: _one(p.post(infer, v2_json, json_type)),
        "v1_instances_500k": lambda p: _one(p.post("v1/models/echo:predict", small, json_type)),
        "v1_instances_6mb": lambda p: _one(p.post("v1/models/echo:predict", large, json_type)),
        "worker_logs": logs,
        "bare_lf": bare_lf,
    }


async def _one(sent: Awaitable[int]) -> list[int]:
    return [await sent]


def probe(base: str, key: str, token: str) -> dict[str, Any]:
    """Each case's longest `/api/status` answer (ms), its answers' statuses and duration."""
    poller = StatusPoller(base, token)
    poller.start()
    prober, results = Prober(base, key, token), {}
    try:
        for name, send in cases().items():
            time.sleep(SETTLE)
            poller.reset()
            began = time.perf_counter()
            statuses: list[int | str]
            try:
                statuses = list(asyncio.run(asyncio.wait_for(send(prober), CASE_LIMIT)))
            except (asyncio.TimeoutError, httpx.HTTPError) as error:
                statuses = [f"not answered: {type(error).__name__}"]
            seconds = time.perf_counter() - began
            time.sleep(SETTLE)
            results[name] = {"status_max_ms": round(poller.longest_ms, 1),
                             "answers": sorted(set(statuses), key=str),
                             "seconds": round(seconds, 2)}  # fmt: skip
    finally:
        poller.done.set()
        poller.join()
    return results


def build_loud(store: Path) -> Path:
    """loud.mar (bench/handlers/loud_handler.py) in the benchmark's model store."""
    spec = ArchiveSpec(model_name="loud", version="1.0", handler=str(HANDLERS / "loud_handler.py"),
                       export_path=str(store), force=True)  # fmt: skip
    return build_mar(spec)


def mint_key(server: servers.JupyterServe) -> str:
    with httpx.Client(headers=server.headers, timeout=30) as client:
        answer = client.post(server.management_url("keys"),
                             json={"name": "stall-probe", "models": ["echo", "loud"]})  # fmt: skip
        answer.raise_for_status()
        return str(answer.json()["key"])


def run(work: Path, store: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """The probe against a fresh jupyter_serve (echo and loud registered) and a bare Jupyter."""
    build_loud(store)
    results: dict[str, Any] = {}
    serve = servers.JupyterServe(work / "stall-js", store)
    try:
        serve.start()
        for model in ("echo", "loud"):
            serve.register(model, batch_size=8, delay_ms=5, workers=1)
        log("stall probe: jupyter_serve")
        results[servers.JupyterServe.name] = probe(serve.base, mint_key(serve), servers.TOKEN)
    finally:
        serve.stop()
    bare = servers.BareJupyter(work / "stall-bare", store)
    try:
        bare.start()
        log("stall probe: bare jupyter_server")
        results[servers.BareJupyter.name] = probe(bare.base, servers.TOKEN, servers.TOKEN)
    finally:
        bare.stop()
    return results


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """Each case's added stall (jupyter_serve's minus the bare server's) and the worst."""
    serve = results.get(servers.JupyterServe.name, {})
    bare = results.get(servers.BareJupyter.name, {})
    if not serve or not bare:
        return {"stall_ms_worst": None, "stall_ms": {}}
    added = {name: round(case["status_max_ms"] - bare[name]["status_max_ms"], 1)
             for name, case in serve.items() if name in bare}  # fmt: skip
    return {"stall_ms_worst": max(added.values(), default=None), "stall_ms": added}
