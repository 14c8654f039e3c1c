"""BaseHandler: device choice, model loading (eager, TorchScript, ONNX), the handle flow."""

from __future__ import annotations

import json
import pickle
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from handler_fakes import FakeContext, eager_manifest, write_eager_model

from jupyter_serve.handlers import loading
from jupyter_serve.handlers.base import BaseHandler
from jupyter_serve.handlers.exceptions import PredictionException

LINEAR = """
import torch
from torch.nn import Linear  # imported classes are not model definitions


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = Linear(2, 2)

    def forward(self, x):
        return self.fc(x)
"""


def _weights(model: Any) -> None:
    model.fc.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    model.fc.bias.zero_()


@pytest.fixture(autouse=True)
def _forget_model_module() -> Any:
    yield
    sys.modules.pop("model", None)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    write_eager_model(tmp_path, LINEAR, _weights, mapping={"0": "zero", "1": ["n1", "one"]})
    return tmp_path


def _loaded(model_dir: Path, **context_args: Any) -> tuple[BaseHandler, FakeContext]:
    context = FakeContext(model_dir, **context_args)
    handler = BaseHandler()
    handler.initialize(context)
    return handler, context


@pytest.mark.parametrize(
    ("gpu_id", "cuda", "mps", "expected"),
    [
        (None, True, True, "cpu"),
        (1, True, False, "cuda:1"),
        (0, False, True, "mps"),
        (0, False, False, "cpu"),
    ],
)
def test_choose_device(gpu_id: int | None, cuda: bool, mps: bool, expected: str) -> None:
    assert loading.choose_device(gpu_id, cuda=cuda, mps=mps) == expected


def test_device_for_uses_cuda_when_torch_reports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert loading.device_for(2) == torch.device("cuda:2")
    assert loading.device_for(None) == torch.device("cpu")


def test_initialize_loads_the_state_dict_labels_and_eval_mode(model_dir: Path) -> None:
    handler, _ = _loaded(model_dir)
    assert handler.initialized
    assert handler.device == torch.device("cpu")
    assert handler.model.training is False
    assert handler.model.fc.weight.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert handler.mapping == {"0": "zero", "1": "one"}


def test_handle_runs_a_batch_and_records_handler_time(model_dir: Path) -> None:
    handler, context = _loaded(model_dir)
    data = [{"data": [1.0, 0.0]}, {"body": b"[0.0, 1.0]"}, {"body": "[1, 1]"}]
    assert handler.handle(data, context) == [[1.0, 3.0], [2.0, 4.0], [3.0, 7.0]]
    [(name, value, idx, unit)] = context.metrics.times
    assert (name, idx, unit) == ("HandlerTime", None, "ms")
    assert value >= 0


def test_handle_rejects_input_that_is_not_numeric(model_dir: Path) -> None:
    handler, context = _loaded(model_dir)
    with pytest.raises(PredictionException) as info:
        handler.handle([{"body": b"not json"}], context)
    assert info.value.error_code == 400


def test_explain_gives_integrated_gradients_per_row_with_its_target(model_dir: Path) -> None:
    handler, context = _loaded(model_dir)
    context.set_header("explain", "True")
    data = [{"data": [1.0, 1.0]}, {"data": [1.0, 1.0], "target": "1"}]
    # For a linear model from a zero baseline the attribution is input * weight.
    [first, second] = handler.handle(data, context)
    assert first == pytest.approx([1.0, 2.0], abs=1e-4)
    assert second == pytest.approx([3.0, 4.0], abs=1e-4)


def test_explain_rejects_a_target_that_is_not_a_class_index(model_dir: Path) -> None:
    handler, context = _loaded(model_dir)
    context.set_header("explain", "true")
    with pytest.raises(PredictionException) as info:
        handler.handle([{"data": [1.0, 1.0], "target": "cat"}], context)
    assert info.value.error_code == 400


def test_describe_returns_model_metadata_instead_of_predicting(model_dir: Path) -> None:
    handler, context = _loaded(model_dir)
    context.set_header("describe", "True")
    [description] = handler.handle([{"data": "ignored"}], context)
    assert description["model_name"] == "tiny"
    assert description["device"] == "cpu"
    assert description["model_type"] == "eager"
    assert description["labels"] == 2
    json.dumps(description)


def test_headers_that_are_false_take_the_prediction_path(model_dir: Path) -> None:
    handler, context = _loaded(model_dir)
    context.set_header("describe", "False")
    context.set_header("explain", "False")
    assert handler.handle([{"data": [1.0, 0.0]}], context) == [[1.0, 3.0]]


def test_torchscript_model_without_model_file(tmp_path: Path) -> None:
    model = write_eager_model(tmp_path / "src", LINEAR, _weights)
    model_dir = tmp_path / "ts"
    model_dir.mkdir()
    with warnings.catch_warnings():  # TorchScript is deprecated, yet TorchServe archives use it
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(model, torch.zeros(1, 2))
        torch.jit.save(traced, str(model_dir / "model.pt"))
    handler, context = _loaded(model_dir, manifest=eager_manifest(model_file=None))
    assert handler.handle([{"data": [0.0, 1.0]}], context) == [[2.0, 4.0]]
    assert handler.describe_handle()["model_type"] == "torchscript"
    assert handler.mapping is None


def test_model_file_must_define_exactly_one_module(tmp_path: Path) -> None:
    write_eager_model(tmp_path, LINEAR)
    source = LINEAR + "\n\nclass Other(torch.nn.Module):\n    pass\n"
    (tmp_path / "model.py").write_text(source)
    with pytest.raises(ValueError, match=r"exactly one torch\.nn\.Module.*Net, Other"):
        _loaded(tmp_path)


def test_missing_weights_file_is_reported(model_dir: Path) -> None:
    (model_dir / "model.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.pt"):
        _loaded(model_dir)


def test_manifest_without_a_model_is_refused(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="neither a modelFile nor a serializedFile"):
        _loaded(model_dir, manifest={"model": {"modelName": "tiny"}})


def test_weights_are_loaded_without_unpickling_code(model_dir: Path) -> None:
    torch.save({"fc.weight": types.SimpleNamespace(a=1)}, model_dir / "model.pt")
    with pytest.raises(pickle.UnpicklingError):
        _loaded(model_dir)


def test_onnx_model_needs_onnxruntime(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    (model_dir / "model.onnx").write_bytes(b"onnx")
    manifest = {"model": {"modelName": "tiny", "serializedFile": "model.onnx"}}
    with pytest.raises(ModuleNotFoundError, match="pip install onnxruntime"):
        _loaded(model_dir, manifest=manifest)


class _FakeOnnxSession:
    """Stands in for onnxruntime.InferenceSession: doubles its only input."""

    def __init__(self, path: str, providers: list[str]) -> None:
        self.path, self.providers = path, providers

    def get_inputs(self) -> list[Any]:
        return [types.SimpleNamespace(name="x")]

    def run(self, outputs: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [feeds["x"] * 2]


def test_onnx_model_runs_through_onnxruntime(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = types.ModuleType("onnxruntime")
    fake.InferenceSession = _FakeOnnxSession  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "onnxruntime", fake)
    (model_dir / "model.onnx").write_bytes(b"onnx")
    manifest = {"model": {"modelName": "tiny", "serializedFile": "model.onnx"}}
    handler, context = _loaded(model_dir, manifest=manifest)
    assert handler.model.providers == ["CPUExecutionProvider"]
    assert handler.handle([{"data": [1.0, 2.5]}], context) == [[2.0, 5.0]]
    assert handler.describe_handle()["model_type"] == "onnx"


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, None),
        ({"pt2": {"compile": {"enable": False, "backend": "inductor"}}}, None),
        ({"pt2": {"compile": {"enable": True, "backend": "eager"}}}, {"backend": "eager"}),
        ({"pt2": {"backend": "inductor", "mode": "max-autotune"}},
         {"backend": "inductor", "mode": "max-autotune"}),
    ],
)  # fmt: skip
def test_compile_options(config: dict[str, Any], expected: dict[str, Any] | None) -> None:
    assert loading.compile_options(config) == expected


def test_pt2_config_compiles_the_model(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, dict[str, Any]]] = []

    def fake_compile(model: Any, **options: Any) -> Any:
        calls.append((model, options))
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    config = {"pt2": {"compile": {"enable": True, "backend": "eager"}}}
    handler, _ = _loaded(model_dir, model_yaml_config=config)
    assert calls == [(handler.model, {"backend": "eager"})]


def test_a_model_file_the_handler_imported_is_reused(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(model_dir))
    import model  # type: ignore[import-not-found]  # as a handler doing `from model import Net`

    handler, _ = _loaded(model_dir)
    assert type(handler.model) is model.Net
