"""Prompts prefilled together (jupyter_serve/handlers/lm_prefill.py): how they are grouped,
and that each gets what its prompt run alone gives, its own KV cache included."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
from lm_models import prompt_ids, tiny_lm

from jupyter_serve.handlers import lm_prefill
from jupyter_serve.handlers.lm_cache import layers_of
from jupyter_serve.handlers.lm_generation import Generation, cache_keyword_of
from jupyter_serve.handlers.lm_prefill import first_group, prefill_groups, prefill_together
from jupyter_serve.wire.generation import GenerationRequest

__all__ = ["tiny_lm"]

PROMPTS = ["The list type", "def main():", "A dictionary maps keys to values, and a set",
           "x", "Classes provide a means of bundling data and functionality together."]  # fmt: skip


class Prompt:
    """What prefill_groups reads of a generation: its prompt's length."""

    def __init__(self, tokens: int) -> None:
        self.prompt_tokens = tokens


def lengths(groups: list[list[Any]]) -> list[list[int]]:
    return [[member.prompt_tokens for member in group] for group in groups]


def cost(groups: list[list[int]]) -> int:
    return sum(lm_prefill.FORWARD_COST + len(group) * max(group) for group in groups)


def test_similar_lengths_share_a_pass_and_outliers_run_alone() -> None:
    groups = lengths(prefill_groups([Prompt(n) for n in (12, 500, 10, 11, 480)]))
    assert groups == [[500, 480], [12, 11, 10]]
    assert lengths(prefill_groups([Prompt(5)])) == [[5]]
    assert prefill_groups([]) == []


@pytest.mark.parametrize("sizes", [(52, 43, 36, 34, 29, 20, 17, 14), (3, 90, 91, 7, 40, 41)])
def test_the_groups_cost_least_of_every_split_of_the_sorted_prompts(sizes: tuple[int, ...]) -> None:
    found = lengths(prefill_groups([Prompt(n) for n in sizes]))
    ordered = sorted(sizes, reverse=True)
    assert sorted(itertools.chain(*found), reverse=True) == ordered  # each prompt once
    splits = [
        [ordered[a:b] for a, b in itertools.pairwise((0, *cuts, len(ordered)))]
        for count in range(len(ordered))
        for cuts in itertools.combinations(range(1, len(ordered)), count)
    ]
    assert cost(found) == min(cost(split) for split in splits)


def test_a_group_never_exceeds_the_positions_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lm_prefill, "MAX_GROUP_TOKENS", 100)
    groups = lengths(prefill_groups([Prompt(40) for _ in range(7)]))
    assert all(len(group) * max(group) <= 100 for group in groups)
    assert sum(map(len, groups)) == 7
    assert lengths(prefill_groups([Prompt(300)])) == [[300]]


def test_the_first_group_is_the_cheapest_per_prompt() -> None:
    def sized(*groups: tuple[int, ...]) -> list[list[Prompt]]:
        return [[Prompt(n) for n in group] for group in groups]

    assert first_group(sized((52, 43), (36, 34, 29), (20, 17, 14))) == 2
    assert first_group(sized((300,), (10,))) == 1
    # many prompts share a pass's fixed cost: (32 + 4 x 40) / 4 < (32 + 30) / 1
    assert first_group(sized((30,), (40, 40, 40, 40))) == 1
    assert first_group(sized((5,))) == 0


def generation(folder: Path, prompt: str) -> Generation:
    tokenizer, _ = loaded(folder)
    request = GenerationRequest(prompt=prompt, temperature=0.0)
    return Generation(request, prompt_ids(folder, prompt), 8, tokenizer, frozenset())


def loaded(folder: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    return AutoTokenizer.from_pretrained(folder), model


def test_each_prompt_gets_its_logits_and_cache_as_if_it_ran_alone(tiny_lm: Path) -> None:
    _, model = loaded(tiny_lm)
    keyword, cpu = cache_keyword_of(model), torch.device("cpu")
    together = [generation(tiny_lm, prompt) for prompt in PROMPTS]
    alone = [generation(tiny_lm, prompt) for prompt in PROMPTS]
    logits = prefill_together(model, together, cpu, keyword)
    assert logits.shape == (len(PROMPTS), model.config.vocab_size)
    for row, (joint, single) in enumerate(zip(together, alone, strict=True)):
        single.prefill(model, cpu, keyword)
        with torch.inference_mode():
            reference = model(input_ids=torch.tensor([single.prompt_ids])).logits[0, -1]
        torch.testing.assert_close(logits[row], reference, rtol=1e-4, atol=1e-4)
        for (keys, values), (ref_keys, ref_values) in zip(
            layers_of(joint.cache), layers_of(single.cache), strict=True
        ):
            assert keys.shape == ref_keys.shape  # its own positions, no padding
            torch.testing.assert_close(keys, ref_keys, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(values, ref_values, rtol=1e-4, atol=1e-4)
        joint.take(logits[row])
        assert joint.cached == joint.prompt_tokens
