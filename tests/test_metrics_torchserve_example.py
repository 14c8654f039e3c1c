"""TorchServe 0.12's `examples/custom_metrics`, unchanged, served by jupyter_serve.

The example's handler, `metrics.yaml` and `config.properties` (tests/data, as
published) run as its README runs them (`--ts-config config.properties --models
mnist=mnist.mar`, from the folder the config's relative `metrics_config` path starts
at). `/metrics` must then list every metric the example declares or emits with the
HELP text, type and label names TorchServe 0.12 gave it (tests/data's recording of a
real TorchServe), and the values one prediction makes.
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import os
import re
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPResponse

from jupyter_serve.archive import ArchiveSpec, build_mar
from jupyter_serve.server.app import ServeApp

Fetch = Callable[..., Awaitable[HTTPResponse]]
DATA = Path(__file__).with_name("data")
EXAMPLE = DATA / "torchserve_custom_metrics"
TORCHSERVE_METRICS = EXAMPLE / "torchserve-0.12-metrics.txt"
HANG_GUARD = 120.0  # seconds; only stops a broken start from hanging the suite
SAMPLE = re.compile(r"^(?P<name>\w+)\{(?P<labels>.*)\} (?P<value>\S+)$")


def families(text: str) -> dict[str, tuple[str, str]]:
    """name -> (HELP line, TYPE line) of a Prometheus text."""
    helps = {line.split()[2]: line for line in text.splitlines() if line.startswith("# HELP ")}
    types = {line.split()[2]: line for line in text.splitlines() if line.startswith("# TYPE ")}
    return {name: (helps[name], types[name]) for name in helps}


def sample_shapes(text: str) -> set[tuple[str, tuple[str, ...]]]:
    """(sample name, label names in order) of every sample line."""
    shapes = set()
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match:
            names = tuple(re.findall(r'(\w+)="', match["labels"]))
            shapes.add((match["name"], names))
    return shapes


def value(text: str, name: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith(name + "{")]
    return float(line.rsplit(" ", 1)[1])


def png_digit() -> bytes:
    from PIL import Image

    image = Image.new("L", (28, 28), 0)
    for x in range(10, 18):
        image.putpixel((x, 14), 255)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jp_environ: Any) -> Path:
    """The example's tree as its README uses it, the mnist archive in a model store, and
    the torchvision stand-in on the workers' PYTHONPATH."""
    folder = tmp_path / "examples" / "custom_metrics"
    folder.mkdir(parents=True)
    for name in ("mnist_handler.py", "metrics.yaml", "config.properties"):
        shutil.copy(EXAMPLE / name, folder / name)
    spec = importlib.util.spec_from_file_location("example_mnist", EXAMPLE / "mnist.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import torch

    torch.save(module.Net().state_dict(), tmp_path / "mnist_cnn.pt")  # random weights
    store = tmp_path / "model_store"
    store.mkdir()
    build_mar(ArchiveSpec(
        model_name="mnist", version="1.0", model_file=str(EXAMPLE / "mnist.py"),
        serialized_file=str(tmp_path / "mnist_cnn.pt"),
        handler=str(folder / "mnist_handler.py"), export_path=str(store),
    ))  # fmt: skip
    monkeypatch.chdir(tmp_path)  # config.properties' metrics_config is relative, as in TS
    standin = str(DATA / "torchvision_standin")  # before jp_environ's PYTHONPATH (sys.path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((standin, os.environ.get("PYTHONPATH", ""))))
    return tmp_path


@pytest.fixture
def jp_server_config(example: Path) -> dict[str, Any]:
    serve = {
        "ts_config": str(example / "examples" / "custom_metrics" / "config.properties"),
        "model_store": str(example / "model_store"),
        "load_models": ["mnist=mnist.mar"],
        "workdir": str(example / "work"),
        "snapshots": False,
        "fork_workers": False,  # fresh workers: they see the PYTHONPATH set above
    }
    return {"ServerApp": {"jpserver_extensions": {"jupyter_serve": True}}, "ServeApp": serve}


async def metrics_text(jp_fetch: Fetch) -> str:
    response = await jp_fetch("serve", "metrics")
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return response.body.decode()


async def test_custom_metrics_example_runs_unmodified_with_torchserves_metrics(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    serve: ServeApp = jp_serverapp.web_app.settings["serve_app"]
    assert serve.metrics_config.endswith("examples/custom_metrics/metrics.yaml")
    assert await asyncio.wait_for(serve.start_models(), HANG_GUARD) == [("mnist", "1.0")]

    loaded = await metrics_text(jp_fetch)  # initialize's metric, before any prediction
    assert value(loaded, "InitializeCallCount") == 1.0
    assert "WorkerLoadTime{WorkerName=" in loaded

    image = png_digit()
    response = await jp_fetch("serve", "predictions", "mnist", method="POST", body=image,
                              headers={"Content-Type": "image/png"})  # fmt: skip
    assert response.code == 200
    assert 0 <= int(response.body) <= 9

    ours, theirs = await metrics_text(jp_fetch), TORCHSERVE_METRICS.read_text()
    assert families(ours).items() >= families(theirs).items()  # every family, HELP and TYPE
    assert sample_shapes(ours) >= sample_shapes(theirs)  # every series, labels in order
    counts = {"InferenceRequestCount": 1.0, "InitializeCallCount": 1.0, "RequestBatchSize": 1.0,
              "PreprocessCallCount": 1.0, "PostprocessCallCount": 1.0,
              "ExamplePercentMetric_count": 1.0, "ExamplePercentMetric_sum": 50.0,
              "ts_inference_requests_total": 1.0}  # fmt: skip
    assert {name: value(ours, name) for name in counts} == counts
    assert value(ours, "SizeOfImage") == len(image) / 1024
    assert 'InferenceRequestCount{Hostname="' in ours  # declared without dimensions
