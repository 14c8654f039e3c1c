"""`BaseHandler`: TorchServe's default model handler, the class users subclass.

The lifecycle is TorchServe's: the worker calls `initialize(context)` once, then
`handle(data, context)` per batch, which runs `preprocess -> inference ->
postprocess`, or `explain_handle` when the request's `explain` header is true,
or `describe_handle` when its `describe` header is. Model loading lives in
`loading.py`; torch and captum are imported inside methods only, so importing
this module is cheap and has no side effects.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_serve.handlers import loading
from jupyter_serve.handlers.exceptions import PredictionException
from jupyter_serve.handlers.timer import timed
from jupyter_serve.handlers.utils import (
    LabelMapping,
    decode_json,
    explain_target,
    load_label_mapping,
    row_input,
)

if TYPE_CHECKING:
    import torch

    from jupyter_serve.handlers.contract import HandlerContext

log = logging.getLogger(__name__)

MAPPING_FILE = "index_to_name.json"


class BaseHandler:
    """Loads a PyTorch model and serves batches of requests with it.

    Subclasses override `preprocess`, `inference`, `postprocess` (and for
    explanations `get_insights`); `initialize` picks the device, loads the model
    named by the manifest and the optional `index_to_name.json` label mapping.
    """

    #: Integration steps of the default Captum IntegratedGradients explanation.
    ig_steps: int = 50

    def __init__(self) -> None:
        self.model: Any = None
        self.mapping: LabelMapping | None = None
        self.device: torch.device | None = None
        self.initialized = False
        self.context: HandlerContext | None = None
        self.manifest: Mapping[str, Any] | None = None
        self.model_dir: Path | None = None
        self.model_pt_path: Path | None = None
        self.map_location: str | None = None
        self.model_onnx = False
        self.explain = False
        self.target = 0

    def initialize(self, context: HandlerContext) -> None:
        """Choose the device, load the model and the label mapping.

        Raises:
            FileNotFoundError: a file the manifest names is missing.
            ValueError: the manifest names no model, or the model file does not
                define exactly one `nn.Module` subclass.
            ModuleNotFoundError: an `.onnx` model without onnxruntime installed.
        """
        self.context = context
        self.manifest = context.manifest
        properties = context.system_properties
        self.model_dir = Path(properties["model_dir"])
        self.device = loading.device_for(properties.get("gpu_id"))
        self.map_location = self.device.type
        self.model = self._load_model(self.manifest.get("model") or {})
        if not self.model_onnx:
            self.model.eval()
            self._maybe_compile(context.model_yaml_config)
        self.mapping = load_label_mapping(self.model_dir / MAPPING_FILE)
        self.initialized = True
        log.info("Loaded %s on %s", self.manifest.get("model", {}).get("modelName"), self.device)

    def _load_model(self, info: Mapping[str, Any]) -> Any:
        assert self.model_dir is not None
        serialized, model_file = info.get("serializedFile"), info.get("modelFile")
        self.model_pt_path = self.model_dir / serialized if serialized else None
        if model_file:
            return self._load_pickled_model(self.model_dir, model_file, self.model_pt_path)
        if self.model_pt_path is None:
            raise ValueError("The manifest names neither a modelFile nor a serializedFile.")
        _require_file(self.model_pt_path)
        if self.model_pt_path.suffix == ".onnx":
            self.model_onnx = True
            return loading.load_onnx_session(self.model_pt_path, self._device())
        return self._load_torchscript_model(self.model_pt_path)

    def _load_pickled_model(
        self, model_dir: str | Path, model_file: str, model_pt_path: str | Path | None
    ) -> torch.nn.Module:
        """The eager model: the class in `model_file` with the state dict `model_pt_path`."""
        weights = Path(model_pt_path) if model_pt_path else None
        if weights is not None:
            _require_file(weights)
        return loading.load_eager_model(Path(model_dir) / model_file, weights, self._device())

    def _load_torchscript_model(self, model_pt_path: str | Path) -> torch.nn.Module:
        """A TorchScript model from `model_pt_path`, on this handler's device."""
        return loading.load_torchscript_model(Path(model_pt_path), self._device())

    def _maybe_compile(self, yaml_config: Any) -> None:
        options = loading.compile_options(yaml_config)
        if options is not None:
            import torch

            log.info("Compiling the model with torch.compile(%s)", options)
            self.model = torch.compile(self.model, **options)

    def _device(self) -> torch.device:
        if self.device is None:
            raise RuntimeError("The handler has no device: call initialize(context) first.")
        return self.device

    @timed
    def preprocess(self, data: Sequence[Any]) -> Any:
        """The batch as one tensor: each row's `data`/`body`, JSON-decoded if raw."""
        import torch

        try:
            values = [decode_json(row_input(row)) for row in data]
            return torch.as_tensor(values, device=self.device)
        except (ValueError, TypeError) as exc:
            raise PredictionException(f"Cannot turn the input into a tensor: {exc}", 400) from exc

    @timed
    def inference(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        """`self.model(data)` on the handler's device, under `torch.inference_mode()`."""
        import torch

        with torch.inference_mode():
            if self.model_onnx:
                return loading.run_onnx(self.model, data)
            if isinstance(data, torch.Tensor):
                data = data.to(self.device)
            return self.model(data, *args, **kwargs)

    @timed
    def postprocess(self, data: Any) -> list[Any]:
        """The model output as (nested) Python lists, one item per row."""
        result: list[Any] = data.tolist()
        return result

    def handle(self, data: list[Any], context: HandlerContext) -> list[Any]:
        """Serve one batch: describe, explain or predict, and record `HandlerTime`."""
        start = time.perf_counter()
        self.context = context
        if _flag(context.get_request_header(0, "describe")):
            output: list[Any] = [self.describe_handle()]
        else:
            data_preprocess = self.preprocess(data)
            self.explain = _flag(context.get_request_header(0, "explain"))
            if self.explain:
                output = self.explain_handle(data_preprocess, data)
            else:
                output = self.postprocess(self.inference(data_preprocess))
        elapsed_ms = round((time.perf_counter() - start) * 1000, 2)
        context.metrics.add_time("HandlerTime", elapsed_ms, None, "ms")
        return output

    def explain_handle(self, data_preprocess: Any, raw_data: Sequence[Any]) -> list[Any]:
        """One explanation per row from `get_insights`, with the row's `target` (default 0)."""
        explanations = []
        for index, row in enumerate(raw_data):
            self.target = explain_target(row)
            single = self._row_of(data_preprocess, index)
            insight = self.get_insights(single, row_input(row), self.target)
            is_single = isinstance(insight, list) and len(insight) == 1
            explanations.append(insight[0] if is_single else insight)
        return explanations

    def _row_of(self, data_preprocess: Any, index: int) -> Any:
        """Row `index` of the preprocessed batch, still batched (a batch of one)."""
        if hasattr(data_preprocess, "__getitem__") and hasattr(data_preprocess, "shape"):
            return data_preprocess[index : index + 1]
        raise TypeError(
            f"{type(self).__name__}.preprocess returned {type(data_preprocess).__name__}; "
            "override explain_handle to explain it row by row."
        )

    def get_insights(self, tensor_data: Any, raw_data: Any, target: int = 0) -> list[Any]:
        """Captum IntegratedGradients attributions of `tensor_data` for class `target`."""
        from captum.attr import IntegratedGradients

        inputs = tensor_data.to(self.device)
        if not inputs.is_floating_point():
            inputs = inputs.float()
        attributions = IntegratedGradients(self.model).attribute(
            inputs, target=target, n_steps=self.ig_steps
        )
        result: list[Any] = attributions.tolist()
        return result

    def describe_handle(self) -> dict[str, Any]:
        """JSON-able metadata about the loaded model (the `describe` request)."""
        info = (self.manifest or {}).get("model") or {}
        return {
            "model_name": getattr(self.context, "model_name", None) or info.get("modelName"),
            "handler": info.get("handler"),
            "handler_class": type(self).__name__,
            "device": str(self.device),
            "model_type": self._model_type(),
            "labels": len(self.mapping) if self.mapping else 0,
        }

    def _model_type(self) -> str:
        if self.model_onnx:
            return "onnx"
        info = (self.manifest or {}).get("model") or {}
        return "eager" if info.get("modelFile") else "torchscript"


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"The model file {path.name} is missing from {path.parent}")


def _flag(value: Any) -> bool:
    """Whether a request header such as `explain: True` is set."""
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return value is True
