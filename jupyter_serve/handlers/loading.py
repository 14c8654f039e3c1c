"""Device choice and model loading for `BaseHandler` (eager, TorchScript, ONNX).

`choose_device` is a pure function of what is available, so it is tested
without a GPU; `device_for` asks torch. The loaders follow TorchServe's rules:
an eager model is the single `nn.Module` subclass defined in the manifest's
`modelFile`, with the `serializedFile` state dict loaded into it
(`weights_only=True`); a `serializedFile` alone is TorchScript, or ONNX when it
ends in `.onnx`. torch is imported inside the functions, never at import time.

Eager weights are shared (`load_shared_weights`): the state dict file is mapped,
not read, and its tensors become the model's, so on the CPU every worker of a
model version uses the same page-cache pages of the extracted file instead of a
private copy each.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import pickle
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jupyter_serve.handlers.utils import list_classes_from_module

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


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
    """Build the model class of `model_file` and load the `weights` state dict (shared)."""
    build = model_class(import_model_file(model_file))
    model = build()
    if weights is not None:
        model = load_shared_weights(model, weights, device, rebuild=build)
    return model.to(device)


def load_shared_weights(
    model: torch.nn.Module,
    path: Path,
    device: torch.device | str = "cpu",
    rebuild: Callable[[], torch.nn.Module] | None = None,
) -> torch.nn.Module:
    """`model` with the state dict at `path`, mapped rather than copied where it can be.

    ``torch.load(path, mmap=True, weights_only=True)`` maps the file and
    ``model.load_state_dict(state, assign=True)`` makes its tensors the model's own,
    so on the CPU the weights stay page-cache pages of the file, shared by every
    process that maps it. Where that cannot be done (a file in torch's legacy
    format, a tensor whose dtype differs from the model's, a model that refuses
    `assign`), a debug line says why and the state dict is loaded as before, into a
    fresh model from `rebuild` if given (else into `model`), as a private copy.
    Custom handlers can call this too (see the README's memory section).

    Returns:
        The model holding the weights: `model`, or the rebuilt one after a fallback.
    """
    import torch

    try:
        state = torch.load(path, map_location=device, weights_only=True, mmap=True)
        reason = _why_not_assignable(model, state)
        if reason is None:
            model.load_state_dict(state, assign=True)
            return model
    except (RuntimeError, TypeError, ValueError, OSError, pickle.UnpicklingError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    log.debug("Loading %s as a private copy, not mapped: %s", path.name, reason)
    target = rebuild() if rebuild is not None else model
    target.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    return target


def _why_not_assignable(model: torch.nn.Module, state: Any) -> str | None:
    """Why `state`'s tensors cannot simply become `model`'s (None: they can)."""
    if not isinstance(state, dict):
        return f"the file holds a {type(state).__name__}, not a state dict"
    own = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    for name, tensor in state.items():
        mine = own.get(name)
        if mine is not None and getattr(tensor, "dtype", mine.dtype) != mine.dtype:
            return f"{name} is {tensor.dtype} in the file but {mine.dtype} in the model"
    return None


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
