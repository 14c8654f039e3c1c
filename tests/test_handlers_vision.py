"""VisionHandler and the image helpers: decoding, transforms, batching, limits, explanations."""

from __future__ import annotations

import base64
import io
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from captum.attr import IntegratedGradients
from handler_fakes import FakeContext, image_bytes, write_eager_model
from PIL import Image

from jupyter_serve.handlers import imaging
from jupyter_serve.handlers.exceptions import PredictionException
from jupyter_serve.handlers.vision import VisionHandler

RED, GREEN, BLUE = (255, 0, 0), (0, 255, 0), (0, 0, 255)

# A 3x8x8 conv net: 1x1 conv, tanh (not linear, so the number of steps matters), linear head.
CONV = """
import torch


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)
        self.head = torch.nn.Linear(4 * 8 * 8, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.conv(x)).flatten(1))
"""


@pytest.fixture(autouse=True)
def _forget_model_module() -> Any:
    yield
    sys.modules.pop("model", None)


@pytest.fixture(autouse=True)
def _restore_pil_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)


def _handler(model_dir: Path, cls: type[VisionHandler] = VisionHandler, **context_args: Any) -> Any:
    context = FakeContext(model_dir, **context_args)
    handler = cls()
    handler.initialize(context)
    return handler, context


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    write_eager_model(tmp_path, CONV)
    return tmp_path


def test_to_tensor_scales_pixels_to_unit_range_in_chw_order() -> None:
    image = Image.open(io.BytesIO(image_bytes([RED, BLUE], size=(4, 2))))
    tensor = imaging.to_tensor(image)
    assert tensor.shape == (3, 2, 4)
    assert tensor[:, 0, 0].tolist() == [1.0, 0.0, 0.0]
    assert tensor[:, 1, 3].tolist() == [0.0, 0.0, 1.0]
    assert imaging.to_tensor(image, "L").shape == (1, 2, 4)


@pytest.mark.parametrize(
    ("size", "target", "expected"),
    [((8, 4), 2, (4, 2)), ((4, 8), 2, (2, 4)), ((6, 6), 6, (6, 6)), ((3, 5), 6, (6, 10))],
)
def test_resize_shorter_keeps_the_aspect_ratio(
    size: tuple[int, int], target: int, expected: tuple[int, int]
) -> None:
    assert imaging.resize_shorter(Image.new("RGB", size), target).size == expected


def test_center_crop_takes_the_middle_and_pads_small_images() -> None:
    tensor = torch.arange(36.0).view(1, 6, 6)
    assert imaging.center_crop(tensor, 2).tolist() == [[[14.0, 15.0], [20.0, 21.0]]]
    padded = imaging.center_crop(torch.ones(1, 2, 2), 4)
    assert padded.sum().item() == 4.0
    assert padded[0, 1:3, 1:3].tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_normalize_is_per_channel() -> None:
    tensor = torch.ones(2, 1, 1)
    assert imaging.normalize(tensor, (0.5, 0.0), (0.5, 2.0)).flatten().tolist() == [1.0, 0.5]


def test_preprocess_accepts_files_base64_and_float_lists(model_dir: Path) -> None:
    handler, _ = _handler(model_dir)
    png = image_bytes([RED, GREEN])
    expected = imaging.to_tensor(Image.open(io.BytesIO(png)))
    rows = [
        {"body": png},
        {"data": bytearray(png)},
        {"body": base64.b64encode(png).decode()},
        {"data": "data:image/png;base64," + base64.b64encode(png).decode()},
        {"data": expected.tolist()},
    ]
    batch = handler.preprocess(rows)
    assert batch.shape == (5, 3, 8, 8)
    for image in batch:
        assert torch.equal(image, expected)


def test_preprocess_decodes_jpeg(model_dir: Path) -> None:
    handler, _ = _handler(model_dir)
    batch = handler.preprocess([{"body": image_bytes([RED], fmt="JPEG")}])
    red, green, _ = batch[0].mean(dim=(1, 2)).tolist()
    assert red > 0.9 > 0.1 > green


class _Small(VisionHandler):
    resize_size = 4
    crop_size = 2
    mean = (0.5, 0.5, 0.5)
    std = (0.5, 0.5, 0.5)


def test_image_processing_is_configured_by_class_attributes(model_dir: Path) -> None:
    handler, _ = _handler(model_dir, _Small)
    batch = handler.preprocess([{"body": image_bytes([RED], size=(16, 8))}])
    assert batch.shape == (1, 3, 2, 2)
    assert batch[0, :, 0, 0].tolist() == [1.0, -1.0, -1.0]


@pytest.mark.parametrize(
    "row",
    [{"body": b"definitely not an image"}, {"body": "not base64 !!"}, {"data": {"a": 1}}],
)
def test_unreadable_inputs_are_client_errors(model_dir: Path, row: dict[str, Any]) -> None:
    handler, _ = _handler(model_dir)
    with pytest.raises(PredictionException) as info:
        handler.preprocess([row])
    assert info.value.error_code == 400


def test_images_of_different_sizes_cannot_share_a_batch(model_dir: Path) -> None:
    handler, _ = _handler(model_dir)
    rows = [{"body": image_bytes([RED])}, {"body": image_bytes([RED], size=(4, 4))}]
    with pytest.raises(PredictionException, match="one shape") as info:
        handler.preprocess(rows)
    assert info.value.error_code == 400


def test_limit_max_image_pixels_sets_pils_limit(model_dir: Path) -> None:
    _handler(model_dir, limit_max_image_pixels=False)
    assert Image.MAX_IMAGE_PIXELS is None
    _handler(model_dir, limit_max_image_pixels=True)
    assert Image.MAX_IMAGE_PIXELS == imaging.PIL_MAX_IMAGE_PIXELS


class _Tiny(VisionHandler):
    max_image_pixels = 10


def test_images_over_the_pixel_limit_are_refused(model_dir: Path) -> None:
    handler, _ = _handler(model_dir, _Tiny)
    with pytest.raises(PredictionException) as info:
        handler.preprocess([{"body": image_bytes([RED])}])  # 64 pixels > 2 x 10
    assert info.value.error_code == 413
    unlimited, _ = _handler(model_dir, _Tiny, limit_max_image_pixels=False)
    assert unlimited.preprocess([{"body": image_bytes([RED])}]).shape == (1, 3, 8, 8)


def test_handle_predicts_one_row_per_image(model_dir: Path) -> None:
    handler, context = _handler(model_dir)
    rows = [{"body": image_bytes([RED])}, {"body": image_bytes([BLUE])}]
    output = handler.handle(rows, context)
    expected = handler.model(handler.preprocess(rows))
    assert torch.allclose(torch.tensor(output), expected)
    assert not torch.allclose(expected[0], expected[1])


def test_explain_gives_15_step_integrated_gradients_per_image(model_dir: Path) -> None:
    handler, context = _handler(model_dir)
    context.set_header("explain", "True")
    rows = [{"body": image_bytes([RED, GREEN])}, {"body": image_bytes([BLUE]), "target": 2}]
    explanations = handler.handle(rows, context)
    batch = handler.preprocess(rows)
    ig = IntegratedGradients(handler.model)
    for index, target in enumerate((0, 2)):
        single = batch[index : index + 1]
        expected = ig.attribute(single, target=target, n_steps=15)[0]
        assert torch.tensor(explanations[index]).shape == (3, 8, 8)
        assert torch.allclose(torch.tensor(explanations[index]), expected, atol=1e-6)
    coarse = ig.attribute(batch[:1], target=0, n_steps=2)[0]
    assert not torch.allclose(torch.tensor(explanations[0]), coarse, atol=1e-6)
