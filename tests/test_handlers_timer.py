"""`timed` (TorchServe's `ts.handler_utils.timer.timed`): profiling metrics of handler steps."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from worker_harness import WorkerProcess, request, write_model

from jupyter_serve.handlers.timer import timed
from jupyter_serve.worker.metrics import MetricsCache


class Steps:
    def __init__(self, yaml: dict[str, Any]) -> None:
        self.context = SimpleNamespace(model_yaml_config=yaml, metrics=MetricsCache("m"))
        self.context.metrics.begin_batch({0: "r0"})

    @timed
    def preprocess(self, data: list[int]) -> list[int]:
        return [value * 2 for value in data]


def test_profiled_steps_add_ts_handler_metrics_in_ms() -> None:
    steps = Steps({"handler": {"profile": True}})
    assert steps.preprocess([1, 2]) == [2, 4]
    [metric] = steps.context.metrics.drain()
    assert (metric["name"], metric["unit"], metric["type"]) == (
        "ts_handler_preprocess",
        "Milliseconds",
        "gauge",
    )
    assert metric["value"] >= 0


def test_without_profile_the_step_runs_untimed() -> None:
    for yaml in ({}, {"handler": {"profile": False}}, {"handler": {"other": 1}}):
        steps = Steps(yaml)
        assert steps.preprocess([3]) == [6]
        assert steps.context.metrics.drain() == []
    assert Steps.preprocess.__name__ == "preprocess"  # functools.wraps keeps the name


HANDLER = """
from ts.handler_utils.timer import timed
from ts.torch_handler.base_handler import BaseHandler


class Profiled(BaseHandler):
    def initialize(self, context):
        self.context = context
        self.initialized = True

    @timed
    def preprocess(self, data):
        return [row.get("body") for row in data]

    @timed
    def inference(self, data):
        return data

    def postprocess(self, data):
        return data
"""


def test_a_torchserve_handler_using_timed_reports_its_steps(tmp_path: Path) -> None:
    model = write_model(tmp_path / "profiled", {"profiled.py": HANDLER}, "profiled.py")
    with WorkerProcess() as worker:
        loaded = worker.load(model, model_yaml_config={"handler": {"profile": True}})
        assert loaded.header["status"] == 200, worker.output()
        reply = worker.infer(request(body="x", content_type="text/plain"))
    names = {metric["name"] for metric in reply.header["metrics"]}
    assert {"ts_handler_preprocess", "ts_handler_inference"} <= names
    assert "ts_handler_postprocess" not in names


def test_base_handler_steps_are_timed_as_torchserve_s() -> None:
    from jupyter_serve.handlers.base import BaseHandler

    handler = BaseHandler()
    handler.context = Steps({"handler": {"profile": True}}).context  # type: ignore[assignment]
    handler.postprocess(handler.preprocess([[1.0, 2.0]]))
    names = [metric["name"] for metric in handler.context.metrics.drain()]  # type: ignore[union-attr]
    assert names == ["ts_handler_preprocess", "ts_handler_postprocess"]
