"""Device choice and model loading for `BaseHandler` (eager, TorchScript, ONNX).

`choose_device` is a pure function of what is available, so it is tested
without a GPU; `device_for` asks torch. The loaders follow TorchServe's rules:
an eager model is the single `nn.Module` subclass defined in the manifest's
`modelFile`, with the `serializedFile` state dict loaded into it
(`weights_only=True`); a `serializedFile` alone is TorchScript, or ONNX when it
ends in `.onnx`. torch is imported inside the functions, never at import time.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .utils import list_classes_from_module

if TYPE_CHECKING:
    import torch


def choose_device(gpu_id: int | None, *, cuda: bool, mps: bool = False) -> str:
    """The device string for a worker given `gpu_id` and the available backends.

    A worker without a `gpu_id` always runs on the CPU, even on a GPU machine.
    """
    if gpu_id is None:
        return "cpu"
    if cuda:
        return f"cuda:{gpu_id}"
    if mps:
        return "mps"
    return "cpu"


def device_for(gpu_id: int | None) -> torch.device:
    """The torch device a handler should use for `gpu_id` on this machine."""
    import torch

    mps = getattr(torch.backends, "mps", None)
    name = choose_device(
        gpu_id,
        cuda=torch.cuda.is_available(),
        mps=bool(mps is not None and mps.is_available()),
    )
    return torch.device(name)


def import_model_file(path: Path) -> ModuleType:
    """Import the model definition file `path` under its stem as module name.

    The module is registered in `sys.modules` (classes defined there must be
    importable by name). If the handler already imported this very file (a
    handler doing `from model import Net`), that module is reused; a module of
    the same name from elsewhere is replaced, as a fresh worker would load it.
    """
    if not path.is_file():
        raise FileNotFoundError(f"Missing the model definition file {path.name} in {path.parent}")
    name = path.stem
    loaded = sys.modules.get(name)
    loaded_file = getattr(loaded, "__file__", None)
    if loaded is not None and loaded_file and Path(loaded_file).resolve() == path.resolve():
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"Cannot import the model file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def model_class(module: ModuleType) -> type[torch.nn.Module]:
    """The one `nn.Module` subclass defined (not imported) in `module`."""
    import torch

    found = list_classes_from_module(module, torch.nn.Module)
    if len(found) != 1:
        names = ", ".join(sorted(cls.__name__ for cls in found)) or "none"
        raise ValueError(
            f"Expected exactly one torch.nn.Module subclass in {module.__name__}.py "
            f"as the model definition; found {names}."
        )
    return found[0]


def load_eager_model(
    model_file: Path, weights: Path | None, device: torch.device
) -> torch.nn.Module:
    """Build the model class of `model_file` and load the `weights` state dict."""
    import torch

    model = model_class(import_model_file(model_file))()
    if weights is not None:
        state = torch.load(weights, map_location=device, weights_only=True)
        model.load_state_dict(state)
    return model.to(device)


def load_torchscript_model(path: Path, device: torch.device) -> torch.nn.Module:
    """A TorchScript archive (`torch.jit.save`) loaded onto `device`.

    TorchScript is deprecated in recent torch releases, but TorchServe archives
    ship it, so the deprecation warning of `torch.jit.load` is silenced here.
    """
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".*torch\.jit\.load.* is deprecated", DeprecationWarning)
        module: torch.nn.Module = torch.jit.load(  # type: ignore[no-untyped-call]
            str(path), map_location=device
        )
    return module


def load_onnx_session(path: Path, device: torch.device) -> Any:
    """An onnxruntime `InferenceSession` for `path`, or a clear error without onnxruntime."""
    try:
        ort = importlib.import_module("onnxruntime")
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"{path.name} is an ONNX model; serving it needs onnxruntime "
            "(pip install onnxruntime, or onnxruntime-gpu for CUDA).",
            name="onnxruntime",
        ) from exc
    providers = ["CPUExecutionProvider"]
    if device.type == "cuda":
        providers.insert(0, "CUDAExecutionProvider")
    return ort.InferenceSession(str(path), providers=providers)


def compile_options(yaml_config: Any) -> dict[str, Any] | None:
    """`torch.compile` keyword arguments from the model-config `pt2` section, if enabled.

    Accepted forms: `pt2: {compile: {enable: true, backend: ..., mode: ...}}`
    and the older `pt2: {backend: inductor, mode: ...}`.
    """
    pt2 = yaml_config.get("pt2") if isinstance(yaml_config, dict) else None
    if not isinstance(pt2, dict):
        return None
    section = pt2.get("compile")
    if isinstance(section, dict):
        if not section.get("enable", False):
            return None
        return {k: v for k, v in section.items() if k != "enable"}
    if "backend" in pt2:
        return {k: v for k, v in pt2.items() if k in ("backend", "mode", "fullgraph", "dynamic")}
    return None


def run_onnx(session: Any, batch: torch.Tensor) -> torch.Tensor:
    """Run an onnxruntime session on `batch` (its first input) and return the first output."""
    import torch

    name = session.get_inputs()[0].name
    outputs = session.run(None, {name: batch.detach().cpu().numpy()})
    return torch.as_tensor(outputs[0])
