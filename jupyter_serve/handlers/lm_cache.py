"""KV caches with room to grow, for the `causal_lm` handler: a decode step writes in place.

transformers' `DynamicCache` grows each layer's keys and values with `torch.cat` at every
forward pass: a fresh allocation and a copy of the whole cache per token. For a batch of
running sequences that is megabytes per layer per step, and it was the largest single
cost of a decode step of a small model. A `GrowingLayer` keeps keys and values in buffers
with spare positions: a step copies in only its new positions, and the layer's `keys` and
`values` are views of the filled part, as the model reads them. A full buffer grows by
half its length (at least `GROW_MIN` positions), so copies stay proportional to the
length. Anything that replaces a layer's `keys` or `values` (transformers' crop, reorder,
offload) is taken as the new content at the next step.

`growing_cache(layers)` is a transformers cache made of such layers, holding the given
per-layer (keys, values) tensors, or empty for a prompt's first forward pass;
`layers_of(cache)` gives a cache's tensors back.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

__all__ = [
    "GROW_MIN",
    "GrowingLayer",
    "Layers",
    "as_cache",
    "growing_cache",
    "layers_of",
    "with_room",
]

GROW_MIN = 64  # positions a buffer gains at least when it grows

Layers = list[tuple[torch.Tensor, torch.Tensor]]


def with_room(length: int) -> int:
    """The positions a buffer holding `length` gets: half as many more, at least GROW_MIN."""
    return length + max(GROW_MIN, length // 2)


class GrowingLayer(DynamicLayer):  # type: ignore[no-untyped-call]  # untyped library
    """One layer's keys and values in buffers with room to grow (module docstring)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.buffers: tuple[torch.Tensor, torch.Tensor] | None = None
        self.filled: tuple[torch.Tensor, torch.Tensor] | None = None  # the views handed out

    @classmethod
    def holding(
        cls, keys: torch.Tensor, values: torch.Tensor, room: int = GROW_MIN
    ) -> GrowingLayer:
        """A layer holding copies of `keys` and `values` [batch, heads, positions, dim],
        with `room` more positions."""
        layer = cls()
        layer.lazy_initialization(keys, values)
        layer.hold(keys, values, keys.shape[-2] + room)
        return layer

    @classmethod
    def over(
        cls, key_buffer: torch.Tensor, value_buffer: torch.Tensor, filled: int
    ) -> GrowingLayer:
        """A layer on these buffers, their first `filled` positions its keys and values."""
        layer = cls()
        layer.lazy_initialization(key_buffer, value_buffer)
        layer.take(key_buffer, value_buffer, filled)
        return layer

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this pass's keys and values; the layer's whole keys and values."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys, values = self._content(key_states, value_states)
        start = keys.shape[-2]
        end = start + key_states.shape[-2]
        if not self._holds(keys, values) or self.buffers is None or end > self.buffers[0].shape[-2]:
            self.hold(keys, values, with_room(end))
        assert self.buffers is not None
        key_buffer, value_buffer = self.buffers
        key_buffer[:, :, start:end].copy_(key_states)
        value_buffer[:, :, start:end].copy_(value_states)
        self.keys, self.values = key_buffer[:, :, :end], value_buffer[:, :, :end]
        self.filled = (self.keys, self.values)
        return self.keys, self.values

    def hold(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        """New buffers of `length` positions beginning with `keys` and `values`."""
        held = keys.shape[-2]
        key_buffer = keys.new_empty((*keys.shape[:2], length, keys.shape[-1]))
        value_buffer = values.new_empty((*values.shape[:2], length, values.shape[-1]))
        key_buffer[:, :, :held].copy_(keys)
        value_buffer[:, :, :held].copy_(values)
        self.take(key_buffer, value_buffer, held)

    def take(self, key_buffer: torch.Tensor, value_buffer: torch.Tensor, filled: int) -> None:
        """Use these buffers, their first `filled` positions as the keys and values."""
        self.buffers = (key_buffer, value_buffer)
        self.keys, self.values = key_buffer[:, :, :filled], value_buffer[:, :, :filled]
        self.filled = (self.keys, self.values)

    def _content(
        self, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values held, [batch, heads, positions, dim]; none yet (transformers'
        empty start) is zero positions shaped as this pass's."""
        if self.keys is not None and self.values is not None and self.keys.dim() == 4:
            return self.keys, self.values
        return key_states[:, :, :0], value_states[:, :, :0]

    def _holds(self, keys: torch.Tensor, values: torch.Tensor) -> bool:
        """Whether `keys` and `values` are this layer's own views (not replaced from outside)."""
        return self.filled is not None and keys is self.filled[0] and values is self.filled[1]


def growing_cache(layers: Layers | list[GrowingLayer] | None = None) -> Any:
    """A transformers cache of `GrowingLayer`s: these, or ones holding `layers`' tensors
    (copied in once, with room to grow), or empty (its layers made as the first forward
    pass reaches them)."""
    if layers is None:
        return Cache(layer_class_to_replicate=GrowingLayer)
    return Cache(layers=[layer if isinstance(layer, GrowingLayer) else GrowingLayer.holding(*layer)
                         for layer in layers])  # fmt: skip


def as_cache(layers: Any) -> Any:
    """A cache the model takes: `layers` (plain per-layer tensors) copied into a growing
    cache, a cache as it is, or a new empty growing cache for None."""
    return growing_cache(layers) if isinstance(layers, list) or layers is None else layers


def layers_of(cache: Any) -> Layers:
    """The (keys, values) tensors of each layer of a KV cache (plain tensors as they are)."""
    if isinstance(cache, list):
        return cache
    return [(layer.keys, layer.values) for layer in cache.layers]
