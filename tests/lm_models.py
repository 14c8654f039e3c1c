"""The tiny language model the LM tests serve, made once per session, and its reference
answers: what `generate()` gives in this process for the same folder.

`tiny_lm` is a pytest fixture (import it into a test module to use it).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from jupyter_serve.archive import ArchiveSpec, build_mar
from jupyter_serve.kernel.tiny_lm import make_tiny_lm


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny Llama and its BPE tokenizer (random weights, seed 0)."""
    return make_tiny_lm(tmp_path_factory.mktemp("tiny-lm") / "tinylm")


def archive_lm(folder: Path, store: Path, name: str = "tinylm", version: str = "1.0",
               config: str | None = None) -> Path:  # fmt: skip
    """`folder` archived as torch-model-archiver packs an LM: handler causal_lm, the folder's
    files as extra files (and `config` as its model-config.yaml)."""
    files = sorted(str(path) for path in folder.iterdir() if path.is_file())
    config_file = None
    if config is not None:
        config_path = store.parent / f"{name}-{version}-config.yaml"
        config_path.write_text(config)
        config_file = str(config_path)
    spec = ArchiveSpec(model_name=name, version=version, handler="causal_lm",
                       extra_files=",".join(files), export_path=str(store),
                       config_file=config_file, force=True)  # fmt: skip
    return build_mar(spec)


@cache
def _loaded(folder: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder)


def prompt_ids(folder: Path, prompt: str | None = None,
               messages: list[dict[str, str]] | None = None) -> list[int]:  # fmt: skip
    """The tokens the handler feeds the model for a prompt or chat messages."""
    tokenizer, _ = _loaded(str(folder))
    if messages is not None:
        encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        return list(encoded.get("input_ids", encoded))
    return list(tokenizer(prompt)["input_ids"])


def greedy(folder: Path, max_new_tokens: int, prompt: str | None = None,
           messages: list[dict[str, str]] | None = None, **penalties: Any) -> str:  # fmt: skip
    """The text greedy `generate()` answers (special tokens skipped); with OpenAI's
    `frequency_penalty`, `presence_penalty` and `logit_bias` as `OpenAIPenalties`."""
    import torch
    from transformers import LogitsProcessorList

    tokenizer, model = _loaded(str(folder))
    ids = prompt_ids(folder, prompt, messages)
    processors = LogitsProcessorList([OpenAIPenalties(len(ids), **penalties)] if penalties else [])
    with torch.inference_mode():
        mask = torch.ones(1, len(ids), dtype=torch.long)
        out = model.generate(torch.tensor([ids]), attention_mask=mask,
                             max_new_tokens=max_new_tokens, do_sample=False,
                             logits_processor=processors)  # fmt: skip
    return str(tokenizer.decode(out[0][len(ids) :], skip_special_tokens=True))


class OpenAIPenalties:
    """A `generate()` logits processor written from OpenAI's definition (its API reference,
    "Frequency and presence penalties"): `mu[j] - c[j] * frequency_penalty - float(c[j] >
    0) * presence_penalty`, `c[j]` how often token j was sampled before, plus `logit_bias`.
    Counted here from the generated ids, apart from the handler's code."""

    def __init__(self, prompt_length: int, frequency_penalty: float = 0.0,
                 presence_penalty: float = 0.0,
                 logit_bias: dict[str, float] | None = None) -> None:  # fmt: skip
        self.prompt_length = prompt_length
        self.frequency, self.presence = frequency_penalty, presence_penalty
        self.bias = {int(token): bias for token, bias in (logit_bias or {}).items()}

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        counts = torch.zeros(scores.shape[-1])
        for token in input_ids[0, self.prompt_length :].tolist():
            counts[token] += 1
        bias = torch.zeros(scores.shape[-1])
        for token, value in self.bias.items():
            bias[token] = value
        return scores + bias - counts * self.frequency - (counts > 0) * self.presence
