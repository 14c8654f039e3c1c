"""Benchmark handler `big`: TorchServe's BaseHandler with its default model loading.

On TorchServe it is `ts.torch_handler.base_handler.BaseHandler`; on jupyter_serve the
`ts` shim maps it to `jupyter_serve.handlers.base.BaseHandler`. So each server loads
the 200 MiB state dict its own default way. A request's body is one number `v`;
the answer is the first 4 outputs for an input of 8192 times `v`. `initialize` ends
with one forward pass (a warm-up), so every worker has read all its weights before
its memory is measured.
"""

from __future__ import annotations

import json

import torch
from ts.torch_handler.base_handler import BaseHandler

IN_FEATURES = 8192


class BigHandler(BaseHandler):
    def initialize(self, context):
        super().initialize(context)
        with torch.inference_mode():
            self.model(torch.zeros(1, IN_FEATURES))

    def preprocess(self, data):
        values = [_number(row.get("body") or row.get("data")) for row in data]
        return torch.tensor(values).unsqueeze(1).expand(-1, IN_FEATURES)

    def postprocess(self, data):
        return [[round(x, 4) for x in row[:4]] for row in data.tolist()]


def _number(value):
    if isinstance(value, (bytes, bytearray, str)):  # servers that leave JSON undecoded
        value = json.loads(value)
    return float(value)
