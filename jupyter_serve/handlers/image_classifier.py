"""`ImageClassifier`: the default handler for image classification models.

Images are resized to 256, center-cropped to 224 and ImageNet-normalized; the
response per image is the top-k (5) classes as `{label: probability}` after a
softmax, labelled with `index_to_name.json` when the archive has one.
"""

from __future__ import annotations

from typing import Any

from jupyter_serve.handlers import imaging
from jupyter_serve.handlers.utils import map_class_to_label
from jupyter_serve.handlers.vision import VisionHandler


class ImageClassifier(VisionHandler):
    """Top-k `{label: probability}` per image from a classifier's logits."""

    topk = 5
    resize_size = 256
    crop_size = 224
    mean = imaging.IMAGENET_MEAN
    std = imaging.IMAGENET_STD

    def set_max_result_classes(self, topk: int) -> None:
        """Return the `topk` most likely classes per image."""
        self.topk = topk

    def get_max_result_classes(self) -> int:
        return self.topk

    def postprocess(self, data: Any) -> list[Any]:
        """Softmax over classes, then the top-k labelled probabilities per image."""
        import torch

        probabilities = torch.softmax(data, dim=1)
        k = min(self.topk, probabilities.shape[1])
        probs, classes = torch.topk(probabilities, k, dim=1)
        return map_class_to_label(probs.tolist(), self.mapping, classes.tolist())
