"""The decode pass (jupyter_serve/handlers/lm_decode.py): a Llama model's fast decode pass
computes bit for bit what the model's forward computes, alone and in a padded batch, and
any other model decodes through its forward."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from jupyter_serve.handlers.lm_cache import growing_cache, layers_of
from jupyter_serve.handlers.lm_decode import LlamaDecoder, ModelDecoder, decoder_for
from jupyter_serve.handlers.lm_generation import cache_keyword_of


def llama(**overrides: Any) -> Any:
    """A tiny random Llama (seed 0), in eval mode, its norms' weights random too (each
    norm then computes something of its own)."""
    shape = {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
             "max_position_embeddings": 256, **overrides}  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**shape)).eval()
    with torch.no_grad():
        for name, weights in model.named_parameters():
            if "norm" in name:
                weights.uniform_(0.5, 1.5)
    return model


def prefilled(model: Any, lengths: list[int]) -> tuple[Any, torch.Tensor]:
    """A growing cache of left-padded prompts of `lengths` and their padding mask."""
    longest = max(lengths)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 90, (len(lengths), longest), generator=generator)
    mask = torch.zeros(len(lengths), longest, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, longest - length :] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                    **{cache_keyword_of(model): growing_cache()})  # fmt: skip
    return getattr(out, cache_keyword_of(model)), mask


def copy_of(cache: Any) -> Any:
    return growing_cache([(keys.clone(), values.clone()) for keys, values in layers_of(cache)])


def decode_both(model: Any, lengths: list[int], steps: int, padded: bool) -> None:
    """`steps` decode passes of both decoders from the same prompts: equal logits and caches
    at each."""
    fast, plain = LlamaDecoder.of(model), ModelDecoder(model, cache_keyword_of(model))
    assert fast is not None
    cache, mask = prefilled(model, lengths)
    caches = [cache, copy_of(cache)]
    positions = torch.tensor([[length] for length in lengths])
    tokens = torch.tensor([[5 + row] for row in range(len(lengths))])
    for _ in range(steps):
        mask = torch.cat([mask, mask.new_ones(len(lengths), 1)], dim=1)
        given = mask if padded else None
        fast_logits, caches[0] = fast(tokens, positions, given, caches[0])
        plain_logits, caches[1] = plain(tokens, positions, given, caches[1])
        assert torch.equal(fast_logits, plain_logits)
        for (keys, values), (ref_keys, ref_values) in zip(*map(layers_of, caches), strict=True):
            assert torch.equal(keys, ref_keys)
            assert torch.equal(values, ref_values)
        tokens, positions = fast_logits.argmax(-1, keepdim=True), positions + 1


def test_one_sequence_decodes_as_the_forward_does() -> None:
    decode_both(llama(), [9], steps=80, padded=False)  # past the cache's room: it grows


def test_a_padded_batch_decodes_as_the_forward_does() -> None:
    decode_both(llama(), [9, 3, 17], steps=20, padded=True)


def test_a_batch_without_padding_decodes_as_the_forward_does() -> None:
    decode_both(llama(), [6, 6], steps=10, padded=True)


@pytest.mark.parametrize("overrides", [
    {"num_key_value_heads": 2},  # grouped-query attention
    {"attention_bias": True, "mlp_bias": True},
    {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}},
    {"head_dim": 32},  # heads narrower than hidden / heads
])  # fmt: skip
def test_llama_variants_decode_as_the_forward_does(overrides: dict[str, Any]) -> None:
    decode_both(llama(**overrides), [7, 2], steps=12, padded=True)


def test_bfloat16_decodes_as_the_forward_does() -> None:
    decode_both(llama().to(torch.bfloat16), [5, 8], steps=6, padded=True)


def test_llama_gets_the_fast_decoder_and_others_their_forward() -> None:
    assert isinstance(decoder_for(llama(), "cache"), LlamaDecoder)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=96, n_embd=32, n_layer=1, n_head=2)).eval()
    assert isinstance(decoder_for(gpt2, cache_keyword_of(gpt2)), ModelDecoder)

    class Subclassed(LlamaForCausalLM):
        pass

    assert LlamaDecoder.of(Subclassed(llama().config).eval()) is None


def test_a_llama_with_an_adapted_projection_keeps_its_forward() -> None:
    class Adapted(torch.nn.Linear):
        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            return super().forward(hidden) * 2

    model = llama()
    old = model.model.layers[1].mlp.up_proj
    model.model.layers[1].mlp.up_proj = Adapted(old.in_features, old.out_features, bias=False)
    assert LlamaDecoder.of(model) is None
    assert isinstance(decoder_for(model, "cache"), ModelDecoder)
