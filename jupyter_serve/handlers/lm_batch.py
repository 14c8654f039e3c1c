"""Running sequences decoded together: one forward pass gives one token of each.

A step of the `causal_lm` handler (jupyter_serve/handlers/causal_lm.py) feeds each running
sequence its last token. One forward pass per sequence costs the model's whole Python
overhead each time; a `DecodeBatch` instead lays the sequences' KV caches out together
(left-padded to the longest, the padding masked out) and runs them as one batch. While the
same sequences run, step after step, that layout is kept and only grows by the new token,
written in place (jupyter_serve/handlers/lm_cache.py; the mask grows by one column); when
one joins or leaves, or one must step alone, each member gets its own cache back (views
of its rows, without the padding) and the next step lays the new set out again. Each
sequence still samples with its own generator. The batch's numbers are the model's
batched numbers: they match a sequence decoded alone up to float rounding, not bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from jupyter_serve.handlers.lm_cache import GrowingLayer, growing_cache, layers_of, with_room
from jupyter_serve.handlers.lm_decode import Decoder
from jupyter_serve.handlers.lm_generation import Generation

__all__ = ["DecodeBatch"]


class DecodeBatch:
    """The running sequences' caches laid out together (module docstring)."""

    def __init__(self) -> None:
        self.members: list[Generation] = []
        self.cache: Any = None
        self.mask: torch.Tensor | None = None

    def decode(
        self, decoder: Decoder, generations: Sequence[Generation], device: torch.device
    ) -> torch.Tensor:
        """The next-token logits of each prefilled generation (one row each), from one
        decode pass (jupyter_serve/handlers/lm_decode.py)."""
        if [id(g) for g in generations] != [id(g) for g in self.members]:
            self.release()
            self._lay_out(generations, device)
        assert self.mask is not None
        mask = torch.cat([self.mask, self.mask.new_ones(len(generations), 1)], dim=1)
        inputs = torch.tensor([[g.generated[-1]] for g in generations], device=device)
        positions = torch.tensor([[g.cached] for g in generations], device=device)
        logits, self.cache = decoder(inputs, positions, mask, self.cache)
        self.mask = mask
        return logits

    def release(self) -> None:
        """Give each member its own cache back (before one steps alone or the set changes)."""
        if self.mask is None:
            return
        width = self.mask.shape[1]
        layers = layers_of(self.cache)
        for row, generation in enumerate(self.members):
            rows, start = slice(row, row + 1), width - generation.cached
            generation.cache = [(keys[rows, :, start:], values[rows, :, start:])
                                for keys, values in layers]  # fmt: skip
        self.members, self.cache, self.mask = [], None, None

    def _lay_out(self, generations: Sequence[Generation], device: torch.device) -> None:
        lengths = [generation.cached for generation in generations]
        longest = max(lengths)
        per_layer = zip(*(layers_of(g.cache) for g in generations), strict=True)
        self.cache = growing_cache([_stack(layer, lengths, longest) for layer in per_layer])
        self.mask = torch.zeros(len(generations), longest, dtype=torch.long, device=device)
        for row, length in enumerate(lengths):
            self.mask[row, longest - length :] = 1
        self.members = list(generations)


def _stack(
    layer: Sequence[tuple[torch.Tensor, torch.Tensor]], lengths: list[int], longest: int
) -> GrowingLayer:
    """One layer's keys and values of every sequence, left-padded to `longest` positions,
    in buffers with room to grow (jupyter_serve/handlers/lm_cache.py)."""
    first_keys, first_values = layer[0]
    room = with_room(longest)
    keys = first_keys.new_zeros((len(layer), first_keys.shape[1], room, first_keys.shape[3]))
    values = first_values.new_zeros((len(layer), first_values.shape[1], room,
                                     first_values.shape[3]))  # fmt: skip
    for row, ((k, v), length) in enumerate(zip(layer, lengths, strict=True)):
        keys[row, :, longest - length : longest] = k[0]
        values[row, :, longest - length : longest] = v[0]
    return GrowingLayer.over(keys, values, longest)
