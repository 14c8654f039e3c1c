"""Benchmark handler `cnn`: a raw float32 3x224x224 body in, `{"class", "score"}` out."""

from __future__ import annotations

import torch
from nets import CNN_SHAPE, cnn


class Cnn:
    def initialize(self, context):
        self.model = cnn()

    def handle(self, data, context):
        images = [_image(row.get("body") or row.get("data")) for row in data]
        with torch.inference_mode():
            probs = torch.softmax(self.model(torch.stack(images)), dim=1)
        score, index = probs.max(dim=1)
        return [{"class": int(i), "score": float(s)} for i, s in zip(index, score, strict=True)]


def _image(body):
    return torch.frombuffer(bytearray(body), dtype=torch.float32).reshape(CNN_SHAPE)
