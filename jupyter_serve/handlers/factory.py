"""`handler_factory`: build a module-level `handle(data, context)` from plain functions.

For models that need no handler class::

    handle = handler_factory(load_model, preprocess_function=parse, postprocess_function=fmt)

The returned `handle` follows TorchServe's function entry-point contract. The
first call (`handle(None, context)` at load, or the first batch) sets up: it
unpacks the model's extra files (`system.extraFiles` in model-config.yaml, a
`.tar.gz` in the model folder) into the model folder, installs missing
`install_packages`, caps the GPU memory (`system.maxGPUMemory`, MB, CUDA only)
and calls `init_function(model_dir=..., device=..., **init_kwargs)`. Each batch
then runs `preprocess_function` per row, stacks the samples into one batch (a
tensor when they all are tensors, else a list), calls the model once under
`torch.inference_mode()` and runs `postprocess_function` per output row.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_serve.handlers import dependencies, loading
from jupyter_serve.handlers.exceptions import PredictionException
from jupyter_serve.handlers.utils import row_input

if TYPE_CHECKING:
    import torch

    from jupyter_serve.handlers.contract import HandlerContext

log = logging.getLogger(__name__)

Handle = Callable[[Any, Any], "list[Any] | None"]


@dataclass
class _Served:
    """What the first call of a factory-made `handle` set up."""

    model: Any
    device: torch.device


def handler_factory(
    init_function: Callable[..., Any],
    preprocess_function: Callable[[Any], Any] | None = None,
    postprocess_function: Callable[[Any], Any] | None = None,
    install_packages: Sequence[str] | None = None,
    unpack_dependencies: bool | str | None = None,
    **init_kwargs: Any,
) -> Handle:
    """A TorchServe function entry point serving the model `init_function` builds.

    Args:
        init_function: Called once as `init_function(model_dir=str, device=torch.device,
            **init_kwargs)`; returns the callable model (placed on `device`).
        preprocess_function: Turns one row's input (its `data` or `body`) into a
            sample; without it the input is the sample.
        postprocess_function: Turns one row of the model output into that row's
            response; without it the output rows are returned as they are.
        install_packages: Requirements to pip-install at load unless installed.
        unpack_dependencies: None unpacks `system.extraFiles` when the model
            config names it; False never unpacks; True requires the setting; a
            string names the archive (relative to the model folder) directly.
        **init_kwargs: Passed on to `init_function`.

    Returns:
        `handle(data, context)`; assign it to a module-level `handle`.
    """
    served: list[_Served] = []
    set_up = functools.partial(
        _set_up,
        init_function=init_function,
        install_packages=install_packages,
        unpack_dependencies=unpack_dependencies,
        init_kwargs=init_kwargs,
    )

    def handle(data: list[Any] | None, context: HandlerContext) -> list[Any] | None:
        if not served:
            served.append(set_up(context))
        if not data:
            return None if data is None else []
        return _predict(served[0], data, preprocess_function, postprocess_function)

    name = getattr(init_function, "__name__", "init_function")
    handle.__doc__ = f"TorchServe entry point serving the model built by {name}."
    return handle


def _set_up(
    context: HandlerContext,
    *,
    init_function: Callable[..., Any],
    install_packages: Sequence[str] | None,
    unpack_dependencies: bool | str | None,
    init_kwargs: Mapping[str, Any],
) -> _Served:
    model_dir = Path(context.system_properties["model_dir"])
    system = _system_config(context.model_yaml_config)
    archive = _dependency_archive(system, unpack_dependencies)
    if archive is not None:
        dependencies.unpack_into(model_dir, archive)
    if install_packages:
        dependencies.install_missing(list(install_packages))
    device = loading.device_for(context.system_properties.get("gpu_id"))
    limit_gpu_memory(system.get("maxGPUMemory"), device)
    model = init_function(model_dir=str(model_dir), device=device, **init_kwargs)
    return _Served(model=model, device=device)


def _system_config(yaml_config: Mapping[str, Any] | None) -> Mapping[str, Any]:
    system = (yaml_config or {}).get("system")
    return system if isinstance(system, Mapping) else {}


def _dependency_archive(system: Mapping[str, Any], unpack: bool | str | None) -> str | None:
    if isinstance(unpack, str):
        return unpack
    if unpack is False:
        return None
    configured = system.get("extraFiles")
    if unpack is True and not configured:
        raise ValueError(
            "unpack_dependencies=True but the model config has no system.extraFiles archive."
        )
    return str(configured) if configured else None


def limit_gpu_memory(max_mb: Any, device: torch.device) -> float | None:
    """Cap this process's CUDA memory on `device` at `max_mb` MB; the fraction set.

    Nothing happens on CPU (or MPS) devices or when `max_mb` is not set.
    """
    if max_mb is None or device.type != "cuda":
        return None
    import torch

    total_mb = torch.cuda.get_device_properties(device).total_memory / 2**20
    fraction = min(1.0, float(max_mb) / total_mb)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    log.info("Limited %s to %.0f MB (%.3f of its memory)", device, float(max_mb), fraction)
    return fraction


def _predict(
    served: _Served,
    data: Sequence[Any],
    preprocess: Callable[[Any], Any] | None,
    postprocess: Callable[[Any], Any] | None,
) -> list[Any]:
    import torch

    inputs = [row_input(row) for row in data]
    samples = [preprocess(value) for value in inputs] if preprocess else inputs
    batch = _collate(samples, served.device)
    with torch.inference_mode():
        output = served.model(batch)
    rows = _split(output, len(data))
    return [postprocess(row) for row in rows] if postprocess else rows


def _collate(samples: list[Any], device: torch.device) -> Any:
    """One tensor batch when every sample is a tensor of one shape, else the list."""
    import torch

    if not samples or not all(isinstance(s, torch.Tensor) for s in samples):
        return samples
    shapes = {tuple(s.shape) for s in samples}
    if len(shapes) > 1:
        raise PredictionException(f"Samples of one batch differ in shape: {sorted(shapes)}", 400)
    return torch.stack(samples).to(device)


def _split(output: Any, size: int) -> list[Any]:
    """The model output as one item per row (tensor rows, list items, dict of tensors)."""
    import torch

    if isinstance(output, torch.Tensor):
        return list(output.unbind(0)) if output.dim() > 0 else [output]
    if isinstance(output, Mapping):
        return [{key: value[i] for key, value in output.items()} for i in range(size)]
    if isinstance(output, (list, tuple)):
        return list(output)
    raise TypeError(
        f"The model returned {type(output).__name__}; expected a tensor, a list or a dict "
        "of batched tensors with one entry per row."
    )
