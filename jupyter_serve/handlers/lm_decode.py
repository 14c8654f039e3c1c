"""A decode pass of the `causal_lm` handler: one new token of each sequence, its logits.

`decoder_for(model, cache_keyword)` gives the handler's decode pass for a model. For any
model it is the model's own forward (`ModelDecoder`). For a Llama model
(`LlamaForCausalLM`, what jupyter_serve/kernel/tiny_lm.py and most fine-tunes are) it is a
`LlamaDecoder`: the same arithmetic on the model's own modules and weights, op for op as
transformers' Llama forward does it (embedding, rotary embedding, per layer RMSNorm,
q/k/v projections, rotation, the KV cache's update, transformers' SDPA attention, output
projection, RMSNorm, MLP; final norm, LM head), without what the forward does around it at
every call: keyword and config merging, output capture, building the attention mask from
the cache, output objects. For a small model that was a third of a decode pass. Its logits
equal the model's forward pass bit for bit (tests/test_lm_decode.py); the model is set to
SDPA attention, transformers' default for Llama, so that prefill (the model's forward) and
decode compute attention the same way.

A decode pass takes `input_ids` [batch, 1], their `positions` [batch, 1], a padding
`mask` [batch, cached + 1] (1 for a real position, 0 for padding; None: no padding) and
the transformers KV cache of the sequences, which it extends in place.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.nn.functional as F

__all__ = ["Decoder", "LlamaDecoder", "ModelDecoder", "decoder_for"]


class Decoder(Protocol):
    """One decode pass (module docstring): the next-token logits [batch, vocab], the cache."""

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
        cache: Any,
    ) -> tuple[torch.Tensor, Any]: ...  # fmt: skip


def decoder_for(model: Any, cache_keyword: str) -> Decoder:
    """The fastest decode pass that computes exactly what `model`'s forward does."""
    return LlamaDecoder.of(model) or ModelDecoder(model, cache_keyword)


class ModelDecoder:
    """A decode pass through the model's own forward (any causal LM)."""

    def __init__(self, model: Any, cache_keyword: str) -> None:
        self.model = model
        self.cache_keyword = cache_keyword

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
        cache: Any,
    ) -> tuple[torch.Tensor, Any]:  # fmt: skip
        with torch.inference_mode():
            out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                             use_cache=True, **{self.cache_keyword: cache})  # fmt: skip
        logits: torch.Tensor = out.logits[:, -1]
        return logits, getattr(out, self.cache_keyword)


class LlamaDecoder:
    """A Llama model's decode pass without its forward's per-call work (module docstring)."""

    def __init__(self, model: Any) -> None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        self.model = model
        self.body = model.model
        self.attention = sdpa_attention_forward
        self.rotate = apply_rotary_pos_emb

    @classmethod
    def of(cls, model: Any) -> LlamaDecoder | None:
        """A decoder for `model` if it is exactly a transformers `LlamaForCausalLM` (a
        subclass may compute otherwise) with plain linear projections, else None."""
        from transformers import LlamaForCausalLM

        if type(model) is not LlamaForCausalLM or not all(map(_plain_linear, _projections(model))):
            return None
        model.set_attn_implementation("sdpa")
        return cls(model)

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
        cache: Any,
    ) -> tuple[torch.Tensor, Any]:  # fmt: skip
        with torch.inference_mode():
            hidden = self.body.embed_tokens(input_ids)
            rotary = self.body.rotary_emb(hidden, positions)
            allowed = None if mask is None else mask[:, None, None, :].bool()
            for index, layer in enumerate(self.body.layers):
                attended = self._attend(layer.self_attn, layer.input_layernorm(hidden),
                                        rotary, allowed, cache, index)  # fmt: skip
                hidden = hidden + attended
                hidden = hidden + _mlp(layer.mlp, layer.post_attention_layernorm(hidden))
            logits: torch.Tensor = self.model.lm_head(self.body.norm(hidden))[:, -1]
        return logits, cache

    def _attend(
        self, attention: Any, hidden: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
        allowed: torch.Tensor | None, cache: Any, index: int,
    ) -> torch.Tensor:  # fmt: skip
        """A layer's self-attention (transformers' LlamaAttention.forward, step by step)."""
        shape = (*hidden.shape[:-1], -1, attention.head_dim)
        query = _linear(attention.q_proj, hidden).view(shape).transpose(1, 2)
        key = _linear(attention.k_proj, hidden).view(shape).transpose(1, 2)
        value = _linear(attention.v_proj, hidden).view(shape).transpose(1, 2)
        query, key = self.rotate(query, key, *rotary)
        keys, values = cache.update(key, value, index)
        out, _ = self.attention(attention, query, keys, values, allowed, dropout=0.0,
                                scaling=attention.scaling)  # fmt: skip
        return _linear(attention.o_proj, out.reshape(*hidden.shape[:-1], -1).contiguous())


def _projections(model: Any) -> list[Any]:
    """Every projection a decode pass calls as `F.linear` on its weights."""
    found = []
    for layer in model.model.layers:
        attention, mlp = layer.self_attn, layer.mlp
        found += [attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj,
                  mlp.gate_proj, mlp.up_proj, mlp.down_proj]  # fmt: skip
    return found


def _plain_linear(module: Any) -> bool:
    """Whether `module` is a `torch.nn.Linear` itself (a quantized or adapted subclass
    computes otherwise)."""
    return type(module) is torch.nn.Linear


def _linear(layer: Any, hidden: torch.Tensor) -> torch.Tensor:
    """`layer(hidden)` for an `nn.Linear`, without the module call's hooks and dispatch."""
    return F.linear(hidden, layer.weight, layer.bias)


def _mlp(mlp: Any, hidden: torch.Tensor) -> torch.Tensor:
    """transformers' LlamaMLP.forward: down(act(gate(x)) * up(x))."""
    return _linear(mlp.down_proj, mlp.act_fn(_linear(mlp.gate_proj, hidden))
                   * _linear(mlp.up_proj, hidden))  # fmt: skip
