"""Handlers written for TorchServe (`ts.*`) or MMS (`mms.*`) run unchanged in a worker."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from worker_harness import WorkerProcess, request, write_model

from jupyter_serve.wire.protocol import Kind
from jupyter_serve.worker import compat

TS_HANDLER = """
import json
import logging

from ts.context import Context
from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes
from ts.torch_handler.base_handler import BaseHandler
from ts.utils.util import PredictionException, load_label_mapping, map_class_to_label

logger = logging.getLogger(__name__)


class ScoreHandler(BaseHandler):
    def initialize(self, context):
        assert isinstance(context, Context)
        properties = context.system_properties
        self.mapping = load_label_mapping(properties["model_dir"] + "/index_to_name.json")
        self.hits = context.metrics.add_metric_to_cache(
            "Hits", "count", ["Label"], MetricTypes.COUNTER
        )
        self.initialized = True
        logger.info("ScoreHandler ready with %d labels", len(self.mapping))

    def preprocess(self, data):
        rows = [row.get("data") or row.get("body") for row in data]
        if any(not isinstance(row, list) for row in rows):
            raise PredictionException("Expected a list of scores", 422)
        return rows

    def inference(self, rows):
        return map_class_to_label(rows, self.mapping)

    def postprocess(self, labelled):
        for row in labelled:
            best = max(row, key=row.get)
            self.hits.add_or_update(1, [best])
        self.context.metrics.add_metric(
            "Rows", len(labelled), "count", None, [Dimension("Kind", "scores")]
        )
        return labelled
"""

MMS_HANDLER = """
from mms.context import Context
from mms.service import PredictionException


def handle(data, context):
    if data is None:
        assert isinstance(context, Context)
        return None
    if data[0].get("body") == "reject":
        raise PredictionException("rejected by the model", 418)
    return [context.system_properties["server_name"] for _ in data]
"""


@pytest.fixture(scope="module")
def ts_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    folder = tmp_path_factory.mktemp("ts") / "scores"
    files = {"score_handler.py": TS_HANDLER, "index_to_name.json": '{"0": "cat", "1": "dog"}'}
    write_model(folder, files, handler="score_handler.py")
    with WorkerProcess() as worker:
        reply = worker.load(folder)
        assert reply.kind is Kind.RESULT, reply.header
        yield worker


def test_torchserve_handler_runs_unchanged(ts_worker: WorkerProcess) -> None:
    bodies = ts_worker.json_bodies(request("a", [0.2, 0.8]), request("b", [0.9, 0.1]))
    assert bodies == [{"cat": 0.2, "dog": 0.8}, {"cat": 0.9, "dog": 0.1}]
    assert "ScoreHandler ready with 2 labels" in ts_worker.output()


def test_torchserve_handler_metrics_come_back(ts_worker: WorkerProcess) -> None:
    reply = ts_worker.infer(request("a", [0.2, 0.8]))
    names = {m["name"]: m for m in reply.header["metrics"]}
    assert names["Hits"]["dimensions"] == {"Label": "dog"}
    assert names["Rows"]["dimensions"] == {
        "Kind": "scores",
        "ModelName": "scores",
        "Level": "Model",
    }
    assert names["HandlerTime"]["unit"] == "Milliseconds"  # recorded by BaseHandler.handle


def test_torchserve_prediction_exception_sets_the_status(ts_worker: WorkerProcess) -> None:
    reply = ts_worker.infer(request("a", b"not a list"))
    assert reply.kind is Kind.ERROR
    assert (reply.header["status"], reply.header["message"]) == (422, "Expected a list of scores")


def test_mms_handler_runs_unchanged(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "mms_model", {"mms_handler.py": MMS_HANDLER})
    with WorkerProcess() as worker:
        assert worker.load(folder, "mms_handler:handle").kind is Kind.RESULT
        assert worker.results(request(body="hi", content_type="text/plain"))[0].body == b"MMS"
        reply = worker.infer(request(body="reject", content_type="text/plain"))
    assert (reply.header["status"], reply.header["message"]) == (418, "rejected by the model")


def test_a_real_ts_package_wins_over_the_shim(tmp_path: Path) -> None:
    real = write_model(tmp_path / "site", {"ts/__init__.py": "MARK = 'real torchserve'\n"})
    handler = "import ts\n\ndef handle(data, context):\n    return data and [ts.MARK]\n"
    folder = write_model(tmp_path / "model", {"uses_ts.py": handler})
    with WorkerProcess(env={"PYTHONPATH": str(real)}) as worker:
        assert worker.load(folder, "uses_ts").kind is Kind.RESULT
        assert worker.results(request())[0].body == b"real torchserve"


def test_install_appends_the_shim_folder_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", ["/first"])
    compat.install()
    compat.install()
    assert sys.path == ["/first", compat.FOLDER]
    assert (Path(compat.FOLDER) / "ts" / "torch_handler" / "base_handler.py").is_file()


def test_forwarder_imports_lazily_and_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    module = type(sys)("fake_shim")
    monkeypatch.setitem(sys.modules, "fake_shim", module)
    getattr_ = compat.forwarder("fake_shim", "json", {"Path": "pathlib"})
    assert getattr_("dumps") is json.dumps
    assert getattr_("Path") is Path
    assert module.dumps is json.dumps  # cached on the module
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        getattr_("nope")
    with pytest.raises(AttributeError):
        compat.forwarder("fake_shim", None)("dumps")


ENVELOPED_HANDLER = """
from ts.torch_handler.request_envelope.json import JSONEnvelope


def _argmax(data, context):
    if data is None:
        return None
    return [max(range(len(row)), key=row.__getitem__) for row in data]


_envelope = JSONEnvelope(_argmax)


def handle(data, context):
    return _envelope.handle(data, context)
"""


def test_a_handler_wrapped_in_a_torchserve_envelope_runs_unchanged(tmp_path: Path) -> None:
    folder = tmp_path / "enveloped"
    write_model(folder, {"enveloped.py": ENVELOPED_HANDLER}, handler="enveloped.py")
    with WorkerProcess() as worker:
        assert worker.load(folder).kind is Kind.RESULT
        answers = worker.json_bodies(
            request("a", {"instances": [[1.0, 2.0], [4.0, 3.0]]}, "application/json"),
            request("b", {"instances": [[5.0, 6.0]]}, "application/json"),
        )
    assert answers == [{"predictions": [1, 0]}, {"predictions": [1]}]


DOUBLING_HANDLER = """
def handle(data, context):
    if data is None:
        return None
    return [value * 2 for value in data]
"""


@pytest.mark.parametrize(
    ("envelope", "body", "expected"),
    [
        ("json", {"instances": [1, 2]}, {"predictions": [2, 4]}),
        ("kserve", {"instances": [1, 2]}, {"predictions": [2, 4]}),
        ("body", 21, 42),
    ],
)
def test_service_envelope_wraps_the_handler_as_torchserve(
    tmp_path: Path, envelope: str, body: Any, expected: Any
) -> None:
    folder = tmp_path / "doubling"
    write_model(folder, {"doubling.py": DOUBLING_HANDLER}, handler="doubling.py")
    with WorkerProcess() as worker:
        assert worker.load(folder, envelope=envelope).kind is Kind.RESULT
        answers = worker.json_bodies(request("a", body, "application/json"))
    assert answers == [expected]


def test_an_unknown_service_envelope_is_a_load_error(tmp_path: Path) -> None:
    folder = tmp_path / "doubling"
    write_model(folder, {"doubling.py": DOUBLING_HANDLER}, handler="doubling.py")
    with WorkerProcess() as worker:
        reply = worker.load(folder, envelope="seldon")
    assert reply.kind is Kind.ERROR
    assert "Unknown service_envelope 'seldon'" in reply.header["message"]
