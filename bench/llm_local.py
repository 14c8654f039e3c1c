"""The LLM part's torch side, run in a child process: make the model folder, and the
in-process limit (greedy `generate()` on the same folder, one request at a time).

    python bench/llm_local.py make FOLDER --shape JSON --train-steps N
    python bench/llm_local.py generate FOLDER --prompts FILE --max-tokens N [--seconds S]

`make` writes jupyter_serve's tiny LM (jupyter_serve/kernel/tiny_lm.py: a byte-level BPE
tokenizer and a Llama decoder of the given `TinyLMShape`, seed 0), trains it for exactly
N steps (seed 0, so the same weights every run) and prints `{"params", "train": {...}}`.
`generate` reads a JSON list of chat conversations, runs greedy `generate()` over them in
turn (the chat template applied as the `causal_lm` handler applies it, then the tokens
`max_new_tokens` allows, ending early only at the end-of-sequence token), repeated until
`--seconds` passed, and prints the tokens/s and each conversation's reference answer
(its text and token count), which the served answers are checked against.

The runner never imports torch (bench/workloads.py says why), hence the child process.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from jupyter_serve.kernel.tiny_lm import TinyLMShape, make_tiny_lm, train_tiny_lm

SEED = 0


def make(folder: Path, shape: dict[str, int], train_steps: int) -> dict[str, Any]:
    """The model folder of the run (module docstring); its parameter count and training."""
    make_tiny_lm(folder, TinyLMShape(**shape), seed=SEED)
    trained = train_tiny_lm(folder, steps=train_steps, seed=SEED) if train_steps else {}
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(folder)
    return {"params": sum(p.numel() for p in model.parameters()), "train": trained}


def generate(folder: Path, conversations: list[Any], max_tokens: int,
             seconds: float) -> dict[str, Any]:  # fmt: skip
    """Greedy answers one after another: tokens/s (prefill included) and the references."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(folder)
    model: Any = AutoModelForCausalLM.from_pretrained(folder).eval()
    prompts = [_ids(tokenizer, messages) for messages in conversations]

    def answer(ids: list[int]) -> list[int]:
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                                 dtype=torch.long), max_new_tokens=max_tokens,
                                 do_sample=False)  # fmt: skip
        return [int(t) for t in out[0][len(ids) :]]

    answer(prompts[0])  # warm up
    references, tokens, rounds = [], 0, 0
    began = time.perf_counter()
    while rounds < 1 or time.perf_counter() - began < seconds:
        for ids in prompts:
            new = answer(ids)
            tokens += len(new)
            if rounds == 0:
                text = tokenizer.decode(new, skip_special_tokens=True)
                references.append({"prompt_tokens": len(ids), "completion_tokens": len(new),
                                   "text": text})  # fmt: skip
        rounds += 1
    elapsed = time.perf_counter() - began
    return {
        "tokens_per_s": round(tokens / elapsed, 1), "requests": rounds * len(prompts),
        "tokens": tokens, "seconds": round(elapsed, 2), "torch_threads": torch.get_num_threads(),
        "references": references,
    }  # fmt: skip


def _ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    return [int(t) for t in ids]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=("make", "generate"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--shape", default="{}", help="TinyLMShape fields as JSON")
    parser.add_argument("--train-steps", type=int, default=0)
    parser.add_argument("--prompts", type=Path, help="a JSON list of chat conversations")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=0.0)
    args = parser.parse_args()
    if args.command == "make":
        result = make(args.folder, json.loads(args.shape), args.train_steps)
    else:
        conversations = json.loads(args.prompts.read_text())
        result = generate(args.folder, conversations, args.max_tokens, args.seconds)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
