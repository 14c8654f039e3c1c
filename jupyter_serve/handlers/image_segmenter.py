"""`ImageSegmenter`: the default handler for semantic segmentation models.

Images are converted to tensors and ImageNet-normalized (no resize). The model
returns class scores `[N, classes, H, W]` (or a dict with them under `"out"`,
as torchvision's segmentation models do); the response per image is an
`[H][W][2]` list of (most likely class index, its probability) per pixel, which
keeps responses small compared with the full per-class map.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jupyter_serve.handlers import imaging
from jupyter_serve.handlers.vision import VisionHandler


class ImageSegmenter(VisionHandler):
    """Per-pixel (top class, probability) maps from a segmentation model."""

    mean = imaging.IMAGENET_MEAN
    std = imaging.IMAGENET_STD

    def postprocess(self, data: Any) -> list[Any]:
        """Softmax over classes, then the winning class and its probability per pixel."""
        import torch

        scores = data["out"] if isinstance(data, Mapping) else data
        probabilities = torch.softmax(scores, dim=1)
        best = torch.max(probabilities, dim=1)
        pairs = torch.stack([best.indices.to(best.values.dtype), best.values], dim=3)
        result: list[Any] = pairs.tolist()
        return result
