"""New requests' prompts run together: one forward pass prefills several KV caches.

When several requests join a step of the `causal_lm` handler (jupyter_serve/handlers/
causal_lm.py) at once (a burst of clients, or the ones that arrived while a step ran),
running each prompt alone costs the model's whole Python overhead per prompt, and every
running request waits for all of them. `prefill_together` lays the prompts out as one batch
instead (left-padded to the longest, the padding masked out, positions counted from each
prompt's first token), and hands each generation its own KV cache back: views of its row
without the padding, as jupyter_serve/handlers/lm_batch.py gives them back after decoding.

Padding is compute spent on nothing, and each forward pass has a fixed cost too (the
model's Python overhead), so `prefill_groups` splits the prompts, sorted by length, into
the groups that cost least in all: a group costs its padded positions (its size times its
longest prompt) plus `FORWARD_COST` positions, and holds at most `MAX_GROUP_TOKENS`
positions (a bound on one forward pass's activations). A step prefills one group,
`first_group`, the one that costs least per prompt: the most requests get their first
token soonest, and the others join at the steps after, beside the running requests. Like
the decode batch, a prompt prefilled beside others gets the model's batched numbers:
equal to its numbers alone up to float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import torch

from jupyter_serve.handlers.lm_cache import layers_of
from jupyter_serve.handlers.lm_generation import Generation, last_logits_only

__all__ = [
    "FORWARD_COST",
    "MAX_GROUP_TOKENS",
    "first_group",
    "padded_positions",
    "prefill_groups",
    "prefill_together",
]

FORWARD_COST = 32  # positions' worth of compute a forward pass costs whatever its size
MAX_GROUP_TOKENS = 8192


class Prompted(Protocol):
    """What grouping reads of a generation."""

    @property
    def prompt_tokens(self) -> int: ...


P = TypeVar("P", bound=Prompted)


def prefill_groups(generations: Sequence[P]) -> list[list[P]]:
    """The generations in the groups of similar prompt lengths that cost least (module
    docstring), longest first."""
    ordered = sorted(generations, key=lambda g: g.prompt_tokens, reverse=True)
    # best[end]: the least cost of ordered[:end]; cut[end]: where its last group starts
    best, cut = [0] + [0] * len(ordered), [0] * (len(ordered) + 1)
    for end in range(1, len(ordered) + 1):
        options = [(best[start] + FORWARD_COST + (end - start) * ordered[start].prompt_tokens,
                    start) for start in range(end)
                   if (end - start) * ordered[start].prompt_tokens <= MAX_GROUP_TOKENS
                   or start == end - 1]  # fmt: skip
        best[end], cut[end] = min(options)
    groups: list[list[P]] = []
    end = len(ordered)
    while end:
        groups.insert(0, ordered[cut[end] : end])
        end = cut[end]
    return groups


def padded_positions(group: Sequence[Prompted]) -> int:
    """The positions a group's forward pass runs: its size times its longest prompt."""
    return len(group) * max(member.prompt_tokens for member in group)


def first_group(groups: Sequence[Sequence[P]]) -> int:
    """Which of `groups` (not empty) to prefill first: the one that costs least per prompt,
    so that the most requests get their first token soonest."""

    def per_prompt(index: int) -> float:
        group = groups[index]
        return (FORWARD_COST + padded_positions(group)) / len(group)

    return min(range(len(groups)), key=per_prompt)


def prefill_together(
    model: Any, generations: Sequence[Generation], device: torch.device, cache_keyword: str
) -> torch.Tensor:
    """Run the prompts of `generations` (none prefilled yet) as one batch; each gets its own
    KV cache; the next-token logits of each (one row each)."""
    lengths = [generation.prompt_tokens for generation in generations]
    longest = max(lengths)
    ids = torch.zeros(len(generations), longest, dtype=torch.long)
    mask = torch.zeros(len(generations), longest, dtype=torch.long)
    for row, (generation, length) in enumerate(zip(generations, lengths, strict=True)):
        ids[row, longest - length :] = torch.tensor(generation.prompt_ids)
        mask[row, longest - length :] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    with torch.inference_mode():
        out = model(input_ids=ids.to(device), attention_mask=mask.to(device),
                    position_ids=positions.to(device), use_cache=True,
                    **last_logits_only(model))  # fmt: skip
    layers = layers_of(getattr(out, cache_keyword))
    for row, (generation, length) in enumerate(zip(generations, lengths, strict=True)):
        rows, start = slice(row, row + 1), longest - length
        generation.cache = [(keys[rows, :, start:], values[rows, :, start:])
                            for keys, values in layers]  # fmt: skip
    logits: torch.Tensor = out.logits[:, -1]
    return logits
