"""A tiny language model made in code: a Hugging Face folder to serve, train or test with.

`make_tiny_lm(folder)` writes what `save_pretrained` writes for a causal LM and its
tokenizer, with nothing downloaded: a byte-level BPE tokenizer trained on text Python
ships (`pydoc_data.topics`, its own documentation; its alphabet is that text's characters,
so every token decodes to whole characters), with a chat template, and a
Llama-shaped model of a few layers with seeded random weights. `train_tiny_lm` then
teaches it that text for a number of steps (a minute on a CPU makes it babble Python
documentation). The folder is what the built-in `causal_lm` handler serves
(jupyter_serve/handlers/causal_lm.py), archived with its files as extra files.

Needs the `llm` extra (`pip install jupyter_serve[llm]`: transformers and tokenizers).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CHAT_TEMPLATE", "TinyLMShape", "corpus", "make_tiny_lm", "train_tiny_lm"]

END = "<|end|>"
SPECIAL_TOKENS = ["<|endoftext|>", END, "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
    f"{END}\n{{% endfor %}}{{% if add_generation_prompt %}}<|assistant|>\n{{% endif %}}"
)


@dataclass(frozen=True)
class TinyLMShape:
    """The model's size: a few layers of a Llama decoder."""

    vocab_size: int = 512
    hidden_size: int = 128
    intermediate_size: int = 256
    layers: int = 4
    heads: int = 4
    context: int = 512


def corpus() -> list[str]:
    """Python's own documentation topics (`pydoc_data.topics`), one text per topic."""
    from pydoc_data.topics import topics

    return [text for _, text in sorted(topics.items())]


@contextmanager
def quiet_progress() -> Iterator[None]:
    """No transformers progress bars (loading, saving) in the cell's output meanwhile."""
    from transformers.utils import logging as hf_logging

    logging: Any = hf_logging  # untyped functions
    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            logging.enable_progress_bar()


def make_tiny_lm(folder: str | Path, shape: TinyLMShape | None = None, seed: int = 0) -> Path:
    """Write a tokenizer and a randomly initialised causal LM into `folder`; return it."""
    shape = shape or TinyLMShape()
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    with quiet_progress():
        tokenizer = _train_tokenizer(shape.vocab_size)
        tokenizer.save_pretrained(target)
        model = _new_model(tokenizer, shape, seed)
        model.save_pretrained(target)
    return target


def train_tiny_lm(
    folder: str | Path,
    seconds: float = 60.0,
    steps: int | None = None,
    batch: int = 16,
    length: int = 64,
    seed: int = 0,
) -> dict[str, float]:
    """Train the model in `folder` on `corpus()` for about `seconds` (or exactly `steps`
    steps: the same weights every time); save it back.

    Returns {"steps", "seconds", "loss"} (the mean loss of the last ten steps).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    with quiet_progress():
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model: Any = AutoModelForCausalLM.from_pretrained(folder)
    ids = torch.tensor(tokenizer("\n".join(corpus()))["input_ids"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    losses: list[float] = []
    began = time.perf_counter()
    while len(losses) < steps if steps is not None else time.perf_counter() - began < seconds:
        starts = torch.randint(0, len(ids) - length - 1, (batch,))
        inputs = torch.stack([ids[s : s + length] for s in starts.tolist()])
        loss = model(input_ids=inputs, labels=inputs).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    model.train(False)
    with quiet_progress():
        model.save_pretrained(folder)
    tail = losses[-10:] or [float("nan")]
    return {"steps": len(losses), "seconds": round(time.perf_counter() - began, 1),
            "loss": round(sum(tail) / len(tail), 3)}  # fmt: skip


def _train_tokenizer(vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    # The alphabet is the corpus's own characters (nearly all ASCII), not all 256 bytes:
    # every token then decodes to whole characters, even from random weights.
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS)
    bpe.train_from_iterator(corpus(), trainer)
    fast: Any = PreTrainedTokenizerFast
    return fast(
        tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token=END,
        pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE,
    )  # fmt: skip


def _new_model(tokenizer: Any, shape: TinyLMShape, seed: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.heads,
        max_position_embeddings=shape.context, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(seed)
    model: Any = LlamaForCausalLM(config)
    return model.train(False)
