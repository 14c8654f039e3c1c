"""The L frame a worker loads with, and how its answer is read (server/pool/load_frame.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_serve.server.models import ModelSpec
from jupyter_serve.server.pool.errors import WorkerLoadError
from jupyter_serve.server.pool.load_frame import UnexpectedAnswer, load_header, loaded_metrics
from jupyter_serve.wire.protocol import Frame, Kind


def test_the_header_carries_what_the_worker_needs_before_the_handler(tmp_path: Path) -> None:
    spec = ModelSpec(model_name="m", version="1.0", model_dir="rel/dir", handler="h.py",
                     manifest={}, python_path=("deps",), batch_size=4,
                     model_yaml_config={"handler": {"x": 1}})  # fmt: skip
    header = load_header(spec, 3, {"A": "1", "B": None}, 2)
    assert header["model_dir"] == os.path.abspath("rel/dir")
    assert header["sys_path"] == [os.path.abspath("deps")]
    assert header["gpu_id"] == 0  # its one visible GPU
    assert load_header(spec, None, {}, None)["gpu_id"] is None
    assert (header["env"], header["torch_threads"], header["batch_size"]) == (
        {"A": "1", "B": None}, 2, 4,
    )  # fmt: skip
    assert header["model_yaml_config"] == {"handler": {"x": 1}}
    assert header["torch_burst_threads"] == 2  # none given: its steady threads
    assert load_header(spec, None, {}, 1, 3)["torch_burst_threads"] == 3


def test_a_loaded_answer_gives_its_metrics() -> None:
    metric = {"name": "Loaded", "value": 1}
    assert loaded_metrics(Frame(Kind.RESULT, {"status": 200, "metrics": [metric]}), "9000") == [
        metric
    ]
    assert loaded_metrics(Frame(Kind.RESULT, {"status": 200}), "9000") == []


def test_a_failed_load_is_its_message_and_status() -> None:
    with pytest.raises(WorkerLoadError) as failed:
        loaded_metrics(Frame(Kind.ERROR, {"status": 507, "message": "OOM", "traceback": "t"}), "1")
    assert (failed.value.status_code, str(failed.value), failed.value.traceback) == (
        507, "OOM", "t",
    )  # fmt: skip
    with pytest.raises(WorkerLoadError) as failed:
        loaded_metrics(Frame(Kind.ERROR, {}), "1")
    assert failed.value.status_code == 500
    assert not isinstance(failed.value, UnexpectedAnswer)


def test_any_other_answer_is_unexpected() -> None:
    for frame in (Frame(Kind.RESULT, {"status": 500}), Frame(Kind.STEP, {"status": 200})):
        with pytest.raises(UnexpectedAnswer, match="answered the load request"):
            loaded_metrics(frame, "9001")
