"""Proof on the real engine: what jupyter_serve exports, TorchServe 0.12 serves the same way.

A jupyter_serve server serves the demo model, a model defined by a `%%handler` cell, a
model with two versions whose default is the older one, and a batched model with two
workers. `jupyter serve export` writes them out; real TorchServe 0.12 (its own venv,
Java 17) starts on the export with KServe's config.properties, only its addresses moved
to loopback ports through the `TS_*` environment (the config turns
`enable_envvars_config` on, as KServe needs). Then every model (and version) answers the
same inputs with the same predictions on both servers, TorchServe's describe shows the
same workers, batch size, max batch delay, timeouts and default version, and
`inferenceservice.yaml` passes KServe's own InferenceService schema.

Marked `torchserve`: `-m "not torchserve"` or `JUPYTER_SERVE_SKIP_TORCHSERVE=1` skips it
on a developer's machine; with `CI=true` it always runs (tests/torchserve_process.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from IPython.core.interactiveshell import InteractiveShell
from kserve_schema import validate_inference_service
from magic_shell import magic_shell
from route_models import register, serve_state, server_config
from torchserve_process import on_export, skip_reason, torchserve_bin

from jupyter_serve.cli import main
from jupyter_serve.demo import build_demo
from jupyter_serve.kernel.client import ServerInfo
from jupyter_serve.server.models import RegisterParams

pytestmark = [
    pytest.mark.torchserve,
    pytest.mark.skipif(skip_reason() is not None, reason=f"TorchServe: {skip_reason()}"),
]

CELSIUS = """
def handle(data, context):
    if data is None:
        return None
    return [{"fahrenheit": float(row["body"]) * 9 / 5 + 32} for row in data]
"""
VERSIONED = """
def handle(data, context):
    if not data:
        return None
    version = context.manifest["model"]["modelVersion"]
    return [{"version": version, "seen": row.get("body")} for row in data]
"""
DOUBLE = """
def handle(data, context):
    if not data:
        return None
    return [[2 * value for value in row.get("body")] for row in data]
"""
SETTINGS = ("minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "responseTimeout",
            "startupTimeout")  # fmt: skip
# (path under predictions/, content type, body): the same requests to both servers
REQUESTS = [
    ("demo", "application/json", b"[6.5, 3.0, 5.8, 2.2]"),
    ("demo", "application/json", b"[5.1, 3.5, 1.4, 0.2]"),
    ("celsius", "text/plain", b"37"),
    ("two", "application/json", b'{"x": 1}'),
    ("two/1.0", "application/json", b'{"x": 2}'),
    ("two/2.0", "application/json", b'{"x": 3}'),
    *[("batched", "application/json", json.dumps([n, n + 1]).encode()) for n in range(8)],
]


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


@pytest.fixture
def shell(
    live_server: ServerInfo, jp_root_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[InteractiveShell]:
    """A kernel's shell in the server's root (its %%handler work folder is there)."""
    monkeypatch.chdir(jp_root_dir)
    with magic_shell(live_server) as ip:
        yield ip


async def serve_the_four(serverapp: Any, shell: InteractiveShell) -> None:
    registry, store = serve_state(serverapp)
    build_demo(str(store))
    await registry.register("demo.mar", RegisterParams(initial_workers=1))
    await asyncio.to_thread(shell.run_cell_magic, "handler", "celsius --serve --workers 1", CELSIUS)
    registry.get("celsius")  # served from the cell's work folder
    await register(serverapp, "two", "1.0", workers=1, source=VERSIONED)
    await register(serverapp, "two", "2.0", workers=1, source=VERSIONED)
    registry.set_default("two", "1.0")
    await register(serverapp, "batched", workers=2, source=DOUBLE, batch_size=4,
                   max_batch_delay_ms=50)  # fmt: skip


async def answers(client: httpx.AsyncClient, prefix: str) -> list[Any]:
    """Every REQUESTS answer's JSON; the batched ones sent at once (so batches form)."""
    sent = [
        client.post(f"{prefix}predictions/{path}", content=body,
                    headers={"Content-Type": kind})
        for path, kind, body in REQUESTS
    ]  # fmt: skip
    replies = await asyncio.gather(*sent)
    assert [reply.status_code for reply in replies] == [200] * len(REQUESTS), [
        reply.text for reply in replies
    ]
    return [reply.json() for reply in replies]


async def describe(
    client: httpx.AsyncClient, port: int, name: str, version: str | None = None
) -> dict[str, Any]:
    path = f"models/{name}" + (f"/{version}" if version else "")
    [described] = (await client.get(f"http://127.0.0.1:{port}/{path}")).json()
    return dict(described)


async def test_torchserve_serves_the_export_as_jupyter_serve_did(
    jp_serverapp: Any, live_server: ServerInfo, shell: InteractiveShell, tmp_path: Path
) -> None:
    bin_dir = await asyncio.to_thread(torchserve_bin, tmp_path / "venv.log")
    await serve_the_four(jp_serverapp, shell)
    registry, _ = serve_state(jp_serverapp)
    token = {"Authorization": f"token {live_server.token}"}
    async with httpx.AsyncClient(headers=token, timeout=120) as client:
        expected = await answers(client, f"{live_server.url}serve/")
    served = {
        (model["modelName"], model["modelVersion"]): model
        for name in ("demo", "celsius", "two", "batched")
        for model in registry.describe(name, "all")
    }

    dest = tmp_path / "export"
    server = ["--url", live_server.url, "--token", live_server.token]
    assert await asyncio.to_thread(main, ["export", str(dest), *server]) == 0
    validate_inference_service(yaml.safe_load((dest / "inferenceservice.yaml").read_text()))

    torchserve, (port, management) = on_export(dest, tmp_path / "torchserve", bin_dir)
    try:
        workers = sum(model["minWorkers"] for model in served.values())
        torchserve.wait_for("WORKER_MODEL_LOADED", count=workers)
        base = f"http://127.0.0.1:{port}/"
        async with httpx.AsyncClient(timeout=120) as client:
            assert await answers(client, base) == expected
            for (name, version), model in served.items():
                described = await describe(client, management, name, version)
                assert [described[key] for key in SETTINGS] == [model[key] for key in SETTINGS]
                assert len(described["workers"]) == model["minWorkers"]
            assert (await describe(client, management, "two"))["modelVersion"] == "1.0"
    finally:
        torchserve.stop()
