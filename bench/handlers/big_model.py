"""The memory benchmark's model: one dense layer holding 200 MiB of float32 weights.

`Big` is the archive's `modelFile`; its state dict (`bench/workloads.py` writes it,
seeded) is the `serializedFile`, so each server loads it its default way.
"""

from __future__ import annotations

import torch
from torch import nn

IN_FEATURES, OUT_FEATURES = 8192, 6400  # 52.4 M parameters: 200 MiB


class Big(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(IN_FEATURES, OUT_FEATURES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)
