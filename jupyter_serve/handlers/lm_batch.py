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

from jupyter_serve.handlers.lm_generation import Generation, as_cache, layers_of

__all__ = ["decode_together"]


def decode_together(
    model: Any, generations: Sequence[Generation], device: torch.device, cache_keyword: str
) -> torch.Tensor:
    """The next-token logits of each prefilled generation (one row each), their caches
    moved one token on."""
    lengths = [generation.cached for generation in generations]
    longest = max(lengths)
    caches = [generation.cache for generation in generations]
    per_layer = zip(*(cache for cache in caches if cache is not None), strict=True)
    stacked = [_stack(layer, lengths, longest) for layer in per_layer]
    mask = torch.zeros(len(generations), longest + 1, dtype=torch.long, device=device)
    for row, length in enumerate(lengths):
        mask[row, longest - length :] = 1
    inputs = torch.tensor([[g.generated[-1]] for g in generations], device=device)
    positions = torch.tensor([[length] for length in lengths], device=device)
    with torch.inference_mode():
        out = model(input_ids=inputs, attention_mask=mask, position_ids=positions,
                    use_cache=True, **{cache_keyword: as_cache(stacked)})  # fmt: skip
    layers = layers_of(getattr(out, cache_keyword))
    for row, (generation, length) in enumerate(zip(generations, lengths, strict=True)):
        rows, start = slice(row, row + 1), longest - length
        generation.cache = [
            (keys[rows, :, start:], values[rows, :, start:]) for keys, values in layers
        ]  # views: copied once, at the next stack
    logits: torch.Tensor = out.logits[:, -1]
    return logits


def _stack(layer: Sequence[tuple[torch.Tensor, torch.Tensor]], lengths: list[int],
           longest: int) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """One layer's keys and values of every sequence, left-padded to `longest` positions."""
    first = layer[0][0]
    shape = (len(layer), first.shape[1], longest, first.shape[3])
    keys, values = first.new_zeros(shape), first.new_zeros(shape)
    for row, ((k, v), length) in enumerate(zip(layer, lengths, strict=True)):
        keys[row, :, longest - length :] = k[0]
        values[row, :, longest - length :] = v[0]
    return keys, values
