"""Benchmark handler `mlp`: a JSON list of 64 floats in, a JSON list of 10 logits out."""

from __future__ import annotations

import json

import torch
from nets import mlp


class Mlp:
    def initialize(self, context):
        self.model = mlp()

    def handle(self, data, context):
        rows = [_floats(row.get("body") or row.get("data")) for row in data]
        with torch.inference_mode():
            logits = self.model(torch.tensor(rows, dtype=torch.float32))
        return [[round(x, 5) for x in row] for row in logits.tolist()]


def _floats(value):
    if isinstance(value, (bytes, bytearray, str)):
        value = json.loads(value)
    return value
