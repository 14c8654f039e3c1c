"""The demo archive: what `build_demo` writes, and its handler's answers (run in-process)."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from jupyter_serve.archive import inspect_archive
from jupyter_serve.demo import DEMO_MODEL, DEMO_VERSION, HANDLER_SOURCE, build_demo
from jupyter_serve.server.models import RegisterParams


def test_build_demo_writes_a_torchserve_archive_and_replaces_an_old_one(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = build_demo(store)
    assert first == store / "demo.mar"
    first.write_bytes(b"stale")
    listing = inspect_archive(build_demo(store))
    assert listing.manifest is not None
    model = listing.manifest.model
    assert (model.model_name, model.model_version) == (DEMO_MODEL, DEMO_VERSION)
    assert model.handler == "iris_demo.py"
    assert sorted(name for name, _ in listing.files) == [
        "MAR-INF/MANIFEST.json",
        "iris_demo.py",
        "model-config.yaml",
    ]


def test_demo_handler_classifies_iris_in_every_input_shape() -> None:
    pytest.importorskip("torch")
    module = types.ModuleType("iris_demo")
    exec(compile(HANDLER_SOURCE, "iris_demo.py", "exec"), module.__dict__)
    handler = module.IrisDemo()
    handler.initialize(None)
    batch = [
        {"body": bytearray(b"[5.1, 3.5, 1.4, 0.2]")},
        {"data": [6.0, 2.9, 4.5, 1.5]},
        {"body": {"instances": [[6.5, 3.0, 5.8, 2.2]]}},
        {"data": b'{"data": [4.9, 3.0, 1.4, 0.2]}'},
    ]
    answers = handler.handle(batch, None)
    assert [max(scores, key=scores.get) for scores in answers] == [
        "setosa",
        "versicolor",
        "virginica",
        "setosa",
    ]
    assert all(sorted(scores) == ["setosa", "versicolor", "virginica"] for scores in answers)
    assert all(abs(sum(scores.values()) - 1) < 1e-3 for scores in answers)


async def test_the_demo_answers_a_customized_describe(jp_fetch: Any, jp_serverapp: Any) -> None:
    store = Path(jp_serverapp.web_app.settings["serve_app"].model_store)
    build_demo(store)
    registry = jp_serverapp.web_app.settings["serve_registry"]
    await registry.register("demo.mar", RegisterParams(initial_workers=1, startup_timeout=60))
    response = await jp_fetch("serve", "models", "demo", params={"customized": "true"})
    [model] = json.loads(response.body)
    assert model["customizedMetadata"]["labels"] == ["setosa", "versicolor", "virginica"]
