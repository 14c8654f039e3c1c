"""KV caches with room to grow (jupyter_serve/handlers/lm_cache.py): a step writes in place,
and the model reads exactly what transformers' own cache would give it."""

from __future__ import annotations

from pathlib import Path

import torch
from lm_models import prompt_ids, tiny_lm
from transformers.cache_utils import DynamicCache, DynamicLayer

from jupyter_serve.handlers.lm_cache import (
    GROW_MIN,
    GrowingLayer,
    as_cache,
    growing_cache,
    layers_of,
)
from jupyter_serve.handlers.lm_generation import cache_keyword_of

__all__ = ["tiny_lm"]


def states(positions: int, batch: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randn(batch, 3, positions, 8, generator=generator)
    return keys, torch.randn(batch, 3, positions, 5, generator=generator)


def test_updates_give_what_a_dynamic_layer_gives() -> None:
    growing, dynamic = GrowingLayer(), DynamicLayer()
    for step, positions in enumerate([7, 1, 1, 40, 1, 90, 1]):  # grows past its room twice
        new_keys, new_values = states(positions, seed=step)
        keys, values = growing.update(new_keys, new_values)
        ref_keys, ref_values = dynamic.update(new_keys, new_values)
        assert torch.equal(keys, ref_keys)
        assert torch.equal(values, ref_values)
        assert growing.get_seq_length() == dynamic.get_seq_length()
    assert growing.buffers is not None
    assert growing.buffers[0].shape[-2] >= growing.get_seq_length()


def test_a_step_writes_in_place_until_the_room_is_used() -> None:
    layer = GrowingLayer()
    layer.update(*states(10))
    assert layer.buffers is not None
    buffer = layer.buffers[0]
    assert buffer.shape[-2] == 10 + GROW_MIN  # the prompt plus room
    for step in range(GROW_MIN):
        keys, _ = layer.update(*states(1, seed=step))
        assert keys.data_ptr() == buffer.data_ptr()  # a view of the same buffer: no copy
    assert layer.buffers[0] is buffer
    layer.update(*states(1, seed=99))
    assert layer.buffers[0] is not buffer  # full: it grew
    assert layer.buffers[0].shape[-2] >= 10 + GROW_MIN + 1 + GROW_MIN


def test_content_replaced_from_outside_is_taken_as_it_is() -> None:
    layer = GrowingLayer()
    layer.update(*states(12))
    layer.crop(-4)  # transformers' crop slices `keys`/`values`
    assert layer.get_seq_length() == 8
    kept = layer.keys.clone()
    layer.batch_select_indices(torch.tensor([1]))  # and this one copies a row out
    keys, _ = layer.update(*states(1, batch=1, seed=5))
    assert keys.shape == (1, 3, 9, 8)
    assert torch.equal(keys[:, :, :8], kept[1:2])


def test_a_layer_over_buffers_starts_from_their_filled_part() -> None:
    keys, values = states(20)
    layer = GrowingLayer.over(keys, values, 6)
    assert layer.get_seq_length() == 6
    grown, _ = layer.update(*states(1, seed=3))
    assert grown.data_ptr() == keys.data_ptr()
    assert grown.shape[-2] == 7


def test_a_cache_of_tensors_holds_copies_and_gives_them_back() -> None:
    layers = [states(5, seed=seed) for seed in range(3)]
    cache = as_cache(layers)
    for (keys, values), (held_keys, held_values) in zip(layers, layers_of(cache), strict=True):
        assert torch.equal(keys, held_keys)
        assert torch.equal(values, held_values)
        assert held_keys.data_ptr() != keys.data_ptr()  # copied in, with room
    assert as_cache(cache) is cache
    assert layers_of(layers) is layers
    assert isinstance(growing_cache().layers, list)
    assert not growing_cache().layers


def test_a_model_decodes_the_same_with_either_cache(tiny_lm: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_lm).eval()
    ids = torch.tensor([prompt_ids(tiny_lm, "A dictionary maps keys to values")])
    growing, dynamic = growing_cache(), DynamicCache()
    keyword = cache_keyword_of(model)
    with torch.inference_mode():
        for _ in range(2 * GROW_MIN):  # past the first buffer's room
            ours = model(input_ids=ids, use_cache=True, **{keyword: growing}).logits[0, -1]
            theirs = model(input_ids=ids, use_cache=True, **{keyword: dynamic}).logits[0, -1]
            assert torch.equal(ours, theirs)
            ids = torch.argmax(theirs).reshape(1, 1)
    assert growing.get_seq_length() == dynamic.get_seq_length()
