"""`ObjectDetector`: the default handler for object detection models.

Images are only converted to `[0, 1]` tensors. The model returns, per image, a
dict of `boxes` `[K, 4]`, `labels` `[K]` and `scores` `[K]` (torchvision's
detection format); the response per image is a list of
`{label: [x1, y1, x2, y2], "score": s}` for detections scoring at least
`threshold` (0.5), labelled with `index_to_name.json` when present.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jupyter_serve.handlers.utils import label_name
from jupyter_serve.handlers.vision import VisionHandler


class ObjectDetector(VisionHandler):
    """Boxes, labels and scores above `threshold` for each image."""

    threshold = 0.5

    def postprocess(self, data: Any) -> list[Any]:
        """The detections of each image scoring at least `threshold`."""
        if not isinstance(data, Sequence) or not all(isinstance(d, Mapping) for d in data):
            raise TypeError(
                "ObjectDetector expects the model to return one dict of "
                f"boxes/labels/scores per image, got {type(data).__name__}"
            )
        return [self._detections(image) for image in data]

    def _detections(self, found: Mapping[str, Any]) -> list[dict[str, Any]]:
        keep = found["scores"] >= self.threshold
        boxes = found["boxes"][keep].tolist()
        labels = found["labels"][keep].tolist()
        scores = found["scores"][keep].tolist()
        return [
            {label_name(int(label), self.mapping): box, "score": score}
            for box, label, score in zip(boxes, labels, scores, strict=True)
        ]
