"""Text helpers for `TextClassifier`: tokenizer, n-grams, vocabulary, token attributions.

* `basic_english` lowercases, drops HTML tags, splits punctuation into tokens
  and splits on whitespace (the behaviour of torchtext's "basic_english").
* `load_vocab` reads the vocabulary from the model folder: `source_vocab.json`
  (a `{token: index}` object or a `[token, ...]` list) or `source_vocab.pt`
  (the same two shapes saved with `torch.save`; torchtext `Vocab` objects are
  refused with a hint, as they cannot be loaded with `weights_only=True`).
* `token_attributions` explains an `EmbeddingBag` model per token with Captum
  IntegratedGradients over a per-token weight, from "no tokens" to "all tokens".
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

UNKNOWN_TOKEN = "<unk>"
_TAG = re.compile(r"<[^>]*>")
_DROPPED = re.compile(r"[\";:]")
_SPLIT_OFF = re.compile(r"([.,!?()'])")


def basic_english(text: str) -> list[str]:
    """Lowercased word and punctuation tokens of `text`, HTML tags removed."""
    text = _TAG.sub(" ", text.lower())
    text = _DROPPED.sub(" ", text)
    return _SPLIT_OFF.sub(r" \1 ", text).split()


def with_ngrams(tokens: Sequence[str], n: int) -> list[str]:
    """`tokens` followed by their 2..n-grams joined with spaces ("new york")."""
    result = list(tokens)
    for size in range(2, n + 1):
        result.extend(" ".join(tokens[i : i + size]) for i in range(len(tokens) - size + 1))
    return result


def load_vocab(model_dir: Path, names: Sequence[str]) -> dict[str, int]:
    """The `{token: index}` vocabulary from the first of `names` found in `model_dir`."""
    for name in names:
        path = model_dir / name
        if path.is_file():
            return _as_vocab(_read_vocab(path), path.name)
    raise FileNotFoundError(
        f"No vocabulary in {model_dir}: add one of {', '.join(names)} to the archive "
        "({token: index} JSON object or [token, ...] list)."
    )


def _read_vocab(path: Path) -> Any:
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ValueError(
            f"{path.name} is not a plain dict or list (a torchtext Vocab?). Save "
            "vocab.get_stoi() as source_vocab.json or with torch.save instead."
        ) from exc


def _as_vocab(content: Any, name: str) -> dict[str, int]:
    if isinstance(content, dict):
        return {str(token): int(index) for token, index in content.items()}
    if isinstance(content, (list, tuple)):
        return {str(token): index for index, token in enumerate(content)}
    raise ValueError(f"{name} must hold a {{token: index}} object or a [token, ...] list")


def token_attributions(
    model: torch.nn.Module, ids: torch.Tensor, target: int, n_steps: int
) -> tuple[list[float], float]:
    """Per-token IntegratedGradients attributions of an `EmbeddingBag` model.

    The model is called as `model(text, offsets)`. Each token's embedding is
    scaled by a weight that goes from 0 to 1; the attributions sum to
    `f(all tokens) - f(no tokens)` for class `target`, up to the returned
    convergence delta.

    Raises:
        NotImplementedError: the model has no `nn.EmbeddingBag` in sum or mean mode.
    """
    import torch
    from captum.attr import IntegratedGradients

    bag = _embedding_bag(model)
    length = ids.numel()
    state: dict[str, torch.Tensor] = {}

    def forward(scales: torch.Tensor) -> torch.Tensor:
        steps = scales.shape[0]
        state["weights"] = scales.reshape(-1)
        offsets = torch.arange(steps, device=ids.device) * length
        result: torch.Tensor = model(ids.repeat(steps), offsets)
        return result

    hook = bag.register_forward_hook(_reweighting_hook(bag, ids, state))
    try:
        ones = torch.ones(1, length, device=ids.device)
        attributions, delta = IntegratedGradients(forward).attribute(
            ones,
            baselines=torch.zeros_like(ones),
            target=target,
            n_steps=n_steps,
            return_convergence_delta=True,
        )
    finally:
        hook.remove()
    return attributions[0].tolist(), float(delta[0])


def _embedding_bag(model: torch.nn.Module) -> torch.nn.EmbeddingBag:
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.EmbeddingBag) and module.mode in ("sum", "mean"):
            return module
    raise NotImplementedError(
        "TextClassifier explanations need a model whose embedding is a torch.nn.EmbeddingBag "
        "(mode 'sum' or 'mean'); override get_insights for other architectures."
    )


def _reweighting_hook(bag: torch.nn.EmbeddingBag, ids: torch.Tensor, state: dict[str, Any]) -> Any:
    """A forward hook replacing the bag's output by its per-token weighted version."""
    import torch.nn.functional as F

    padding = bag.padding_idx
    counted = int((ids != padding).sum()) if padding is not None else ids.numel()

    def hook(module: torch.nn.Module, inputs: tuple[Any, ...], output: Any) -> Any:
        text, offsets = inputs[0], inputs[1]
        summed = F.embedding_bag(
            text,
            bag.weight,
            offsets,
            mode="sum",
            per_sample_weights=state["weights"],
            padding_idx=padding,
        )
        return summed / max(counted, 1) if bag.mode == "mean" else summed

    return hook
