"""Fakes and builders for the model-handler tests (jupyter_serve.handlers).

`FakeContext` is a real, minimal implementation of the TorchServe `Context`
surface the handlers use (TorchServe's own MockContext plays this role), with
recorded metrics and settable request headers. The builders write tiny model
folders: a model definition file, its state dict, a label mapping.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from PIL import Image


class FakeMetrics:
    """Records `add_time` calls as (name, value, idx, unit)."""

    def __init__(self) -> None:
        self.times: list[tuple[str, float, int | None, str]] = []

    def add_time(self, name: str, value: float, idx: int | None = None, unit: str = "ms") -> None:
        self.times.append((name, value, idx, unit))


class FakeContext:
    """The per-batch context a worker hands to `initialize` and `handle`."""

    def __init__(
        self,
        model_dir: Path,
        manifest: Mapping[str, Any] | None = None,
        *,
        gpu_id: int | None = None,
        limit_max_image_pixels: bool = True,
        model_yaml_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.model_name = "tiny"
        self.manifest = dict(manifest or eager_manifest())
        self.system_properties: dict[str, Any] = {
            "model_dir": str(model_dir),
            "gpu_id": gpu_id,
            "batch_size": 4,
            "server_name": "MMS",
            "server_version": "test",
            "limit_max_image_pixels": limit_max_image_pixels,
        }
        self.model_yaml_config = dict(model_yaml_config or {})
        self.request_ids = {0: "request-0"}
        self.metrics = FakeMetrics()
        self.headers: dict[int, dict[str, Any]] = {}

    def set_header(self, key: str, value: Any, idx: int = 0) -> None:
        self.headers.setdefault(idx, {})[key] = value

    def get_request_header(self, idx: int, key: str) -> Any:
        return self.headers.get(idx, {}).get(key)

    def get_all_request_header(self, idx: int) -> dict[str, Any]:
        return dict(self.headers.get(idx, {}))


def eager_manifest(
    handler: str = "base_handler", model_file: str | None = "model.py"
) -> dict[str, Any]:
    model: dict[str, Any] = {"modelName": "tiny", "serializedFile": "model.pt", "handler": handler}
    if model_file:
        model["modelFile"] = model_file
    return {"runtime": "python", "model": model}


def model_class(source: str) -> type[torch.nn.Module]:
    """The single nn.Module subclass that `source` defines."""
    namespace: dict[str, Any] = {"__name__": "tiny_model_source"}
    exec(compile(source, "model.py", "exec"), namespace)
    found = [
        value
        for value in namespace.values()
        if isinstance(value, type)
        and issubclass(value, torch.nn.Module)
        and value.__module__ == "tiny_model_source"
    ]
    assert len(found) == 1
    return found[0]


def write_eager_model(
    model_dir: Path,
    source: str,
    configure: Callable[[Any], None] | None = None,
    *,
    mapping: Mapping[str, str] | None = None,
) -> torch.nn.Module:
    """Write `model.py` and its state dict `model.pt` (after `configure`) into `model_dir`."""
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "model.py").write_text(source)
    torch.manual_seed(0)
    model = model_class(source)()
    if configure is not None:
        with torch.no_grad():
            configure(model)
    torch.save(model.state_dict(), model_dir / "model.pt")
    if mapping is not None:
        (model_dir / "index_to_name.json").write_text(json.dumps(dict(mapping)))
    return model.eval()


def image_bytes(
    colors: list[tuple[int, int, int]], size: tuple[int, int] = (8, 8), fmt: str = "PNG"
) -> bytes:
    """An image file whose width is split into vertical bands of `colors`."""
    width, height = size
    image = Image.new("RGB", size)
    band = max(width // len(colors), 1)
    for x in range(width):
        color = colors[min(x // band, len(colors) - 1)]
        for y in range(height):
            image.putpixel((x, y), color)
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()
