"""The whole runtime from a .mar: archiver -> extract -> ModelSpec -> batcher -> real workers.

A TorchServe-style handler file (it imports `ts.*`), an eager model (model file +
state_dict), `index_to_name.json` and a `model-config.yaml` are packed with
`jupyter-serve-archiver` exactly as a TorchServe user would, then served by real
worker processes; answers are compared with the same model run in this process.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jupyter_serve.archive import extract_mar
from jupyter_serve.server.batching import Batcher
from jupyter_serve.server.models import RegisterParams, resolve_spec
from jupyter_serve.server.pool import WorkerPool
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult, Parameter

torch = pytest.importorskip("torch")

T = TypeVar("T")

MODEL_FILE = """
import torch


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x)
"""

# Written against TorchServe's API only: this file would run unchanged in TorchServe.
TS_HANDLER = """
import torch
from ts.torch_handler.base_handler import BaseHandler
from ts.utils.util import PredictionException


class TinyHandler(BaseHandler):
    def preprocess(self, data):
        rows = [row.get("data") or row.get("body") for row in data]
        if any(not isinstance(row, list) for row in rows):
            raise PredictionException("expected a JSON list of 4 numbers", 422)
        self.context.metrics.add_counter("BatchRows", len(rows))
        return torch.tensor(rows, dtype=torch.float32)

    def postprocess(self, data):
        best = data.argmax(dim=1).tolist()
        return [{"label": self.mapping[str(i)], "batch": len(best)} for i in best]
"""

CONFIG = "batchSize: 4\\nmaxBatchDelay: 5000\\njupyter_serve:\\n  batchPolicy: strict\\n"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 120))


@pytest.fixture(scope="module")
def tiny_mar(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    src = tmp_path_factory.mktemp("tiny_src")
    (src / "model.py").write_text(MODEL_FILE)
    (src / "handler.py").write_text(TS_HANDLER)
    (src / "index_to_name.json").write_text(json.dumps({"0": "ant", "1": "bee", "2": "cat"}))
    (src / "model-config.yaml").write_text(CONFIG.replace("\\n", "\n"))
    sys.path.insert(0, str(src))
    try:
        from model import TinyNet  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(src))
    torch.manual_seed(0)
    net = TinyNet().eval()
    torch.save(net.state_dict(), src / "tiny.pt")
    archiver = Path(sys.executable).with_name("jupyter-serve-archiver")
    subprocess.run(
        [str(archiver), "--model-name", "tiny", "--version", "1.2", "--model-file", "model.py",
         "--serialized-file", "tiny.pt", "--handler", "handler.py",
         "--extra-files", "index_to_name.json", "--config-file", "model-config.yaml"],
        cwd=src, check=True,
    )  # fmt: skip
    return src / "tiny.mar", net


def json_request(rid: str, payload: object) -> InferenceRequest:
    body = json.dumps(payload).encode()
    return InferenceRequest(rid, {}, (Parameter("body", "application/json", body),))


def test_torchserve_style_mar_serves_strict_batches_with_real_workers(
    tiny_mar: tuple[Path, Any], tmp_path: Path
) -> None:
    mar, net = tiny_mar
    model_dir = extract_mar(mar, tmp_path / "work" / "tiny")
    spec = resolve_spec(model_dir, gpus=0)
    assert (spec.model_name, spec.version, spec.batch_size) == ("tiny", "1.2", 4)
    assert spec.batch_policy == "strict"
    rows = [[float(i), 1.0 - i, 0.5 * i, -float(i)] for i in range(4)]
    batches: list[int] = []

    async def main() -> tuple[list[InferenceResult], BaseException | None]:
        pool = WorkerPool(spec, Batcher.for_spec(spec), gpu_count=lambda: 0,
                          on_metrics=lambda *args: batches.append(args[3]))  # fmt: skip
        assert (await pool.scale(1)).ok
        deadline = asyncio.get_running_loop().time() + 60
        futures = [
            pool.batcher.submit(json_request(f"r{i}", row), deadline) for i, row in enumerate(rows)
        ]
        results = list(await asyncio.gather(*futures))
        bad = pool.batcher.submit(json_request("bad", {"not": "a list"}), deadline)
        await asyncio.wait([bad])
        await pool.stop()
        return results, bad.exception()

    results, error = run(main())
    expected = net(torch.tensor(rows)).argmax(dim=1).tolist()
    labels = ["ant", "bee", "cat"]
    assert [json.loads(r.body) for r in results] == [
        {"label": labels[i], "batch": 4} for i in expected
    ]
    assert batches[0] == 4  # the four concurrent requests travelled as one batch
    assert error is not None
    assert getattr(error, "status_code", None) == 422
    assert "expected a JSON list" in str(error)


def test_register_time_handler_override_and_rest_batch_size_win(
    tiny_mar: tuple[Path, Any], tmp_path: Path
) -> None:
    mar, _ = tiny_mar
    model_dir = extract_mar(mar, tmp_path / "work" / "tiny")
    (model_dir / "other.py").write_text(
        "def handle(data, context):\n"
        "    return None if data is None else [f'override:{len(data)}' for _ in data]\n"
    )
    spec = resolve_spec(model_dir, params=RegisterParams(handler="other:handle", batch_size=2),
                        gpus=0)  # fmt: skip
    assert spec.batch_size == 2  # REST beats the yaml's 4

    async def main() -> list[InferenceResult]:
        pool = WorkerPool(spec, Batcher.for_spec(spec), gpu_count=lambda: 0)
        assert (await pool.scale(1)).ok
        deadline = asyncio.get_running_loop().time() + 60
        futures = [pool.batcher.submit(json_request(f"r{i}", [i]), deadline) for i in range(2)]
        results = list(await asyncio.gather(*futures))
        await pool.stop()
        return results

    assert [r.body for r in run(main())] == [b"override:2", b"override:2"]
