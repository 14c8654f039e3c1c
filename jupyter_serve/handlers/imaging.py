"""Image decoding and the torchvision-style transforms the vision handlers need.

torchvision is not a dependency, so this module provides the few steps the
default handlers use, with the same semantics: decode a PNG/JPEG with PIL,
resize the shorter side, convert to a float CHW tensor in [0, 1], center-crop
(zero padding when the image is smaller) and normalize per channel. PIL and
torch are imported inside the functions.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jupyter_serve.handlers.exceptions import PredictionException

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: PIL's own default `Image.MAX_IMAGE_PIXELS` (about 89.5 megapixels).
PIL_MAX_IMAGE_PIXELS = 1024 * 1024 * 1024 // 4 // 3


def decode_base64(text: str) -> bytes:
    """The bytes of a base64 string (a data URL prefix is allowed), or a 400 error."""
    if text.startswith("data:") and "," in text:
        text = text.split(",", 1)[1]
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PredictionException("The image string is not valid base64.", 400) from exc


def open_image(raw: bytes | bytearray) -> Image:
    """Decode an image file (PNG, JPEG, ... anything PIL reads) from `raw`.

    Raises:
        PredictionException: 413 when the image has more pixels than PIL's
            `MAX_IMAGE_PIXELS` allows, 400 when it is not a readable image.
    """
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    try:
        image = PILImage.open(io.BytesIO(raw))
        image.load()
    except PILImage.DecompressionBombError as exc:
        raise PredictionException(f"The image is too large: {exc}", 413) from exc
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise PredictionException(f"The input is not a readable image: {exc}", 400) from exc
    return image


def resize_shorter(image: Image, size: int) -> Image:
    """`image` scaled (bilinear, aspect kept) so its shorter side is `size` pixels."""
    from PIL import Image as PILImage

    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    if short == size:
        return image
    new_long = int(size * long / short)
    new_size = (size, new_long) if width <= height else (new_long, size)
    return image.resize(new_size, PILImage.Resampling.BILINEAR)


def to_tensor(image: Image, mode: str = "RGB") -> torch.Tensor:
    """A float tensor `[C, H, W]` in [0, 1] of `image` converted to `mode`."""
    import torch

    converted = image.convert(mode) if image.mode != mode else image
    width, height = converted.size
    channels = len(converted.getbands())
    pixels = torch.frombuffer(bytearray(converted.tobytes()), dtype=torch.uint8)
    return pixels.view(height, width, channels).permute(2, 0, 1).float().div(255)


def center_crop(tensor: torch.Tensor, size: int) -> torch.Tensor:
    """The central `size` x `size` window of a `[..., H, W]` tensor, zero-padded if smaller."""
    import torch.nn.functional as F

    height, width = tensor.shape[-2:]
    pad_h, pad_w = max(size - height, 0), max(size - width, 0)
    if pad_h or pad_w:
        padding = (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2)
        tensor = F.pad(tensor, padding)
        height, width = tensor.shape[-2:]
    top = round((height - size) / 2.0)
    left = round((width - size) / 2.0)
    return tensor[..., top : top + size, left : left + size]


def normalize(tensor: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """`(tensor - mean) / std` per channel of a `[C, H, W]` tensor."""
    import torch

    mean_t = torch.as_tensor(mean, dtype=tensor.dtype).view(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=tensor.dtype).view(-1, 1, 1)
    return (tensor - mean_t) / std_t
