"""Proof on the real engine: an exported language model runs on TorchServe 0.12 unchanged.

jupyter_serve serves the tiny LM with its built-in `causal_lm` handler (continuous
batching, batch size 8: the handler's defaults) and answers a few requests one after
another: prompts and chat messages at temperature 0, one that ends after its first
token, one past the context window (a 400). `jupyter serve export` writes it out; TorchServe 0.12
(bench/.venv-ts) starts on the export with its addresses alone moved to loopback ports
(`TS_*`), so it creates the model's virtual environment and pip-installs its
requirements itself (`install_py_dep_per_model=true`, `useVenv: true`). The same
requests to `predictions/tinylm` get the same statuses and the same text, streamed in
chunks; sent all at once they run together (the same statuses, streamed); TorchServe's
describe shows the batch size, and its worker's log one handler call per token
(continuous batching), not one per request.

One after another, because the handler may decode running requests in one forward pass,
which agrees with decoding each alone only up to float rounding, and which requests run
together depends on when each arrives: the texts of the round sent at once are not
compared.

TorchServe's venv lacks transformers: it is installed there first (the ranges of
jupyter_serve's `llm` extra) when missing, so the model's venv finds it and the pip
TorchServe runs has only to check it.

Marked `torchserve`: `-m "not torchserve"` or `JUPYTER_SERVE_SKIP_TORCHSERVE=1` skips it
on a developer's machine; with `CI=true` it always runs (tests/torchserve_process.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kserve_schema import validate_inference_service
from lm_models import archive_lm, tiny_lm
from route_models import serve_state, server_config
from torchserve_process import bench_servers, on_export, skip_reason, torchserve_bin

from jupyter_serve.cli import main
from jupyter_serve.export.lm_archive import REQUIREMENTS
from jupyter_serve.kernel.client import ServerInfo
from jupyter_serve.server.models import HANDLER_DEFAULTS, RegisterParams

__all__ = ["tiny_lm"]

pytestmark = [
    pytest.mark.torchserve,
    pytest.mark.skipif(skip_reason() is not None, reason=f"TorchServe: {skip_reason()}"),
]

REQUESTS: list[dict[str, Any]] = [
    {"prompt": "The list type", "max_new_tokens": 16},
    {"prompt": "def main():", "max_new_tokens": 24, "temperature": 0},
    {"messages": [{"role": "user", "content": "What is a dict?"}], "max_new_tokens": 12},
    {"prompt": "Lists are", "max_new_tokens": 1},  # ends at its first step: one plain answer
    {"prompt": "Hello", "max_new_tokens": 100_000},  # past the window: refused, 400
]
SETTINGS = ("minWorkers", "batchSize", "maxBatchDelay", "responseTimeout")


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


def with_transformers(bin_dir: Path, log: Path) -> None:
    """transformers and tokenizers in TorchServe's venv, installed when missing."""
    python = str(bin_dir / "python")
    leaks = bench_servers().PIP_LEAKS  # a PYTHONPATH (pytest-jupyter's) would show this
    env = {key: value for key, value in os.environ.items() if key not in leaks}  # venv's
    check = [python, "-c", "import transformers, tokenizers"]
    if subprocess.run(check, capture_output=True, env=env).returncode == 0:
        return
    with log.open("a") as out:
        subprocess.run([python, "-m", "pip", "install", "-q", *REQUIREMENTS],
                       check=True, stdout=out, stderr=out, env=env)  # fmt: skip


async def answers(
    client: httpx.AsyncClient, url: str, at_once: bool = False
) -> list[tuple[int, str, str]]:
    """(status, Transfer-Encoding, body) of every request, one after another or all at once."""
    if at_once:
        replies = await asyncio.gather(*[client.post(url, json=body) for body in REQUESTS])
    else:
        replies = [await client.post(url, json=body) for body in REQUESTS]
    return [(r.status_code, r.headers.get("transfer-encoding", ""), r.text) for r in replies]


async def test_torchserve_serves_the_exported_language_model_as_jupyter_serve_did(
    jp_serverapp: Any, live_server: ServerInfo, tiny_lm: Path, tmp_path: Path
) -> None:
    bin_dir = await asyncio.to_thread(torchserve_bin, tmp_path / "venv.log")
    await asyncio.to_thread(with_transformers, bin_dir, tmp_path / "venv.log")
    registry, store = serve_state(jp_serverapp)
    archive_lm(tiny_lm, store)
    await registry.register("tinylm.mar", RegisterParams(initial_workers=1))
    [served] = registry.describe("tinylm")
    token = {"Authorization": f"token {live_server.token}"}
    async with httpx.AsyncClient(headers=token, timeout=120) as client:
        expected = await answers(client, f"{live_server.url}serve/predictions/tinylm")
    assert [status for status, _, _ in expected] == [200, 200, 200, 200, 400]
    assert all(text for _, _, text in expected[:3])
    assert json.loads(expected[4][2])["error_code"] == "context_length_exceeded"

    dest = tmp_path / "export"
    server = ["--url", live_server.url, "--token", live_server.token]
    assert await asyncio.to_thread(main, ["export", str(dest), *server]) == 0
    services = list(yaml.safe_load_all((dest / "inferenceservice.yaml").read_text()))
    for service in services:
        validate_inference_service(service)
    assert [s["spec"]["predictor"]["model"]["modelFormat"]["name"] for s in services] == [
        "huggingface"
    ]

    torchserve, ports = on_export(dest, tmp_path / "torchserve", bin_dir)
    try:
        torchserve.wait_for("WORKER_MODEL_LOADED", count=served["minWorkers"])
        assert "Installed custom pip packages for model tinylm" in torchserve.log()
        url = f"http://127.0.0.1:{ports.inference}/predictions/tinylm"
        async with httpx.AsyncClient(timeout=120) as client:
            got = await answers(client, url)
            together = await answers(client, url, at_once=True)
            [described] = (
                await client.get(f"http://127.0.0.1:{ports.management}/models/tinylm")
            ).json()
        assert [(status, text) for status, _, text in got] == [
            (status, text) for status, _, text in expected
        ], torchserve.log()
        for replies in (got, together):
            assert [encoding for _, encoding, _ in replies[:3]] == ["chunked"] * 3  # streamed
            assert [status for status, _, _ in replies] == [200, 200, 200, 200, 400]
        assert [described[key] for key in SETTINGS] == [served[key] for key in SETTINGS]
        assert described["batchSize"] == HANDLER_DEFAULTS["causal_lm"]["batch_size"]
    finally:
        torchserve.stop()
    # Continuously batched: a call per token (the first answer alone has 16). Run to the end
    # per batch instead, the five requests would take at most five calls.
    calls = (tmp_path / "torchserve" / "logs" / "model_log.log").read_text()
    assert calls.count("Backend received inference at") > len(REQUESTS)
