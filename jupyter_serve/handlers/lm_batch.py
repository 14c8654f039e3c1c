"""Running sequences decoded together: one forward pass gives one token of each.

A step of the `causal_lm` handler (jupyter_serve/handlers/causal_lm.py) feeds each running
sequence its last token. One forward pass per sequence costs the model's whole Python
overhead each time; `decode_together` instead stacks the sequences' KV caches (left-padded
to the longest, the padding masked out) and runs them as one batch, then hands each
sequence its own cache back (its rows, without the padding). Each sequence still samples
with its own generator. The batch's numbers are the model's batched numbers: they match a
sequence decoded alone up to float rounding, not bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from jupyter_serve.handlers.lm_generation import Generation

__all__ = ["decode_together"]


def decode_together(
    model: Any, generations: Sequence[Generation], device: torch.device, cache_keyword: str
) -> torch.Tensor:
    """The next-token logits of each prefilled generation (one row each), their caches
    moved one token on."""
    from transformers.cache_utils import DynamicCache

    lengths = [generation.cached for generation in generations]
    longest = max(lengths)
    per_layer = zip(*(_layers(generation.cache) for generation in generations), strict=True)
    stacked = [_stack(layer, lengths, longest) for layer in per_layer]
    mask = torch.zeros(len(generations), longest + 1, dtype=torch.long, device=device)
    for row, length in enumerate(lengths):
        mask[row, longest - length :] = 1
    inputs = torch.tensor([[g.generated[-1]] for g in generations], device=device)
    positions = torch.tensor([[length] for length in lengths], device=device)
    with torch.inference_mode():
        out = model(input_ids=inputs, attention_mask=mask, position_ids=positions,
                    use_cache=True, **{cache_keyword: DynamicCache(stacked)})  # fmt: skip
    layers = _layers(getattr(out, cache_keyword))
    for row, (generation, length) in enumerate(zip(generations, lengths, strict=True)):
        rows = slice(row, row + 1)
        start = longest - length
        generation.cache = DynamicCache([(keys[rows, :, start:], values[rows, :, start:])
                                         for keys, values in layers])  # fmt: skip
    logits: torch.Tensor = out.logits[:, -1]
    return logits


def _layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _stack(
    layer: Sequence[tuple[torch.Tensor, torch.Tensor]], lengths: list[int], longest: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's keys and values of every sequence, left-padded to `longest` positions."""
    keys = [F.pad(k, (0, 0, longest - n, 0)) for (k, _), n in zip(layer, lengths, strict=True)]
    values = [F.pad(v, (0, 0, longest - n, 0)) for (_, v), n in zip(layer, lengths, strict=True)]
    return torch.cat(keys), torch.cat(values)
