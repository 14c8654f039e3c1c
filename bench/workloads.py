"""The benchmark's models: their `.mar` files, request bodies and response checks.

`build_store(folder)` archives `bench/handlers/` into `echo.mar`, `mlp.mar` and
`cnn.mar` with jupyter_serve's own archiver, and `big.mar` (the memory part's
model: `big_model.Big` with a seeded 200 MiB state dict, loaded by TorchServe's
BaseHandler); the SAME files are then registered on every server. `workloads()`
says, per model, what one request sends and how its answer is checked (echo: the
exact body back; mlp: 10 finite logits; cnn: a class index in [0, 1000) and a
probability; big: 4 finite outputs).
"""

from __future__ import annotations

import json
import math
import random
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_serve.archive import ArchiveSpec, build_mar

HANDLERS = Path(__file__).resolve().parent / "handlers"
MODELS = ("echo", "mlp", "cnn")
BIG = "big"
ECHO_BYTES = 1024
MLP_IN = 64
CNN_FLOATS = 3 * 224 * 224


@dataclass(frozen=True)
class Workload:
    """One model: its request body, content type and answer check."""

    model: str
    body: bytes
    content_type: str
    check: Callable[[int, bytes], bool]


def build_store(folder: Path, models: tuple[str, ...] = (*MODELS, BIG)) -> dict[str, Path]:
    """Write the `models`' .mar files into `folder`; returns {model: path}."""
    folder.mkdir(parents=True, exist_ok=True)
    return {
        model: _build_big(folder) if model == BIG else _build(model, folder) for model in models
    }


def _build_big(folder: Path) -> Path:
    """big.mar, made in a child process (`python bench/workloads.py big FOLDER`): the
    runner itself never imports torch, so its own mappings of torch's libraries never
    share, and so halve, the PSS of the servers' processes it measures."""
    subprocess.run([sys.executable, __file__, BIG, str(folder)], check=True)
    return folder / f"{BIG}.mar"


def _build_big_here(folder: Path) -> Path:
    """big.mar: big_model.py and its seeded state dict, stored uncompressed (random floats)."""
    import torch

    from jupyter_serve.handlers.loading import import_model_file, model_class

    torch.manual_seed(0)
    big = model_class(import_model_file(HANDLERS / "big_model.py"))()
    with tempfile.TemporaryDirectory() as work:
        weights = Path(work) / "big.pt"
        torch.save(big.state_dict(), weights)
        spec = ArchiveSpec(
            model_name=BIG, version="1.0", handler=str(HANDLERS / "big_handler.py"),
            serialized_file=str(weights), model_file=str(HANDLERS / "big_model.py"),
            export_path=str(folder), archive_format="zip-store", force=True,
        )  # fmt: skip
        return build_mar(spec)


def _build(model: str, folder: Path) -> Path:
    extra = () if model == "echo" else (str(HANDLERS / "nets.py"),)
    spec = ArchiveSpec(
        model_name=model,
        version="1.0",
        handler=str(HANDLERS / f"{model}_handler.py"),
        extra_files=extra,
        export_path=str(folder),
        force=True,
    )
    return build_mar(spec)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def echo_check(sent: bytes) -> Callable[[int, bytes], bool]:
    return lambda status, body: status == 200 and body == sent


def _finite_floats_check(count: int) -> Callable[[int, bytes], bool]:
    """A 200 whose JSON body is a list of `count` finite floats (mlp's logits, big's outputs)."""

    def check(status: int, body: bytes) -> bool:
        values = _json(body)
        return (
            status == 200
            and isinstance(values, list)
            and len(values) == count
            and all(isinstance(x, float) and math.isfinite(x) for x in values)
        )

    return check


def _cnn_check(status: int, body: bytes) -> bool:
    answer = _json(body)
    return (
        status == 200
        and isinstance(answer, dict)
        and answer.get("class") in range(1000)
        and 0.0 <= answer.get("score", -1.0) <= 1.0
    )


def workloads() -> dict[str, Workload]:
    """Fixed, seeded bodies for each model."""
    rng = random.Random(0)
    echo = bytes(rng.getrandbits(8) for _ in range(ECHO_BYTES))
    mlp = json.dumps([round(rng.uniform(-1, 1), 4) for _ in range(MLP_IN)]).encode()
    image = struct.pack(f"{CNN_FLOATS}f", *(rng.random() for _ in range(CNN_FLOATS)))
    return {
        "echo": Workload("echo", echo, "application/octet-stream", echo_check(echo)),
        "mlp": Workload("mlp", mlp, "application/json", _finite_floats_check(10)),
        "cnn": Workload("cnn", image, "application/octet-stream", _cnn_check),
        BIG: Workload(BIG, b"0.5", "application/json", _finite_floats_check(4)),
    }


if __name__ == "__main__":  # `python bench/workloads.py big FOLDER`: see `_build_big`
    if sys.argv[1:2] != [BIG] or len(sys.argv) != 3:
        sys.exit(f"usage: python {sys.argv[0]} {BIG} FOLDER")
    _build_big_here(Path(sys.argv[2]))
