"""The benchmark's networks in plain torch, shared by the handlers and the in-process limit.

`mlp()` is a small MLP (64 -> 256 -> 256 -> 10). `cnn()` is a ResNet-18-shaped
network (basic blocks 2-2-2-2, 64..512 channels, 224x224 input, about 1.8 GFLOPs
per image), seeded so both servers build the same weights without a large file.
Imported by the handlers from the model folder, and by `bench/inprocess.py`.
"""

from __future__ import annotations

import torch
from torch import nn

MLP_IN = 64
MLP_OUT = 10
CNN_SHAPE = (3, 224, 224)


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(MLP_IN, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, MLP_OUT)
    ).eval()


class Block(nn.Module):
    """A ResNet basic block: two 3x3 convolutions and a shortcut."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False),
            nn.BatchNorm2d(outputs),
            nn.ReLU(inplace=True),
            nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False),
            nn.BatchNorm2d(outputs),
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def cnn() -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    channels = 64
    for outputs, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(channels, outputs, stride), Block(outputs, outputs, 1)]
        channels = outputs
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers).eval()
