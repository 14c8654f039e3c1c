"""One request's generation in the `causal_lm` handler: its KV cache, its tokens, its text.

A `Generation` advances one token per step: the first runs the whole prompt (`prefill`)
and each later one the last token against the request's own KV cache (`decode`), so a
request's numbers never depend on the other requests of the batch: at temperature 0 it
answers exactly what greedy `generate()` answers for the same prompt. Sampling uses the
request's own generator (seeded by `seed`, else at random): a seed reproduces the answer
whatever runs beside it. Before a token is chosen, the request's penalties and biases
adjust its logits as OpenAI defines them, from this answer's own tokens (`adjusted`), so
a penalised request too answers the same alone or in a batch. A step returns the text
now complete (jupyter_serve/handlers/lm_text.py holds back half characters and what may
begin a stop sequence); `finish_reason` is set once the answer is over: "stop" (end of
sequence token or stop sequence) or "length" (`max_new_tokens`, or the context window).
"""

from __future__ import annotations

import inspect
import secrets
from collections.abc import Sequence
from functools import cache
from typing import Any

import torch

from jupyter_serve.handlers.lm_cache import as_cache
from jupyter_serve.handlers.lm_decode import Decoder
from jupyter_serve.handlers.lm_text import Detokenizer, StopWatch
from jupyter_serve.wire.generation import GenerationRequest

__all__ = ["Generation", "cache_keyword_of", "choose_token", "last_logits_only"]


class Generation:
    """The state of one request between steps (module docstring)."""

    def __init__(
        self,
        request: GenerationRequest,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        tokenizer: Any,
        end_ids: frozenset[int],
    ) -> None:
        self.request = request
        self.prompt_ids = list(prompt_ids)
        self.max_new_tokens = max_new_tokens
        self.end_ids = end_ids
        self.generated: list[int] = []
        # A growing cache while it steps alone (lm_cache.py), else per layer (keys, values)
        # tensors [1, heads, cached, dim] (views of a batch's, lm_batch.py)
        self.cache: Any = None
        self.finish_reason: str | None = None
        self.counts: torch.Tensor | None = None  # each token's count in the answer (penalties)
        self.bias: torch.Tensor | None = None  # each token's logit bias
        seed = request.seed if request.seed is not None else secrets.randbits(63)
        self.generator = torch.Generator().manual_seed(seed)
        self.text = Detokenizer(lambda ids: tokenizer.decode(ids, skip_special_tokens=True))
        self.stops = StopWatch(request.stop)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def completion_tokens(self) -> int:
        return len(self.generated)

    def prefill(self, model: Any, device: torch.device, cache_keyword: str) -> str:
        """Run the prompt alone through the model's forward (its KV cache made) and take
        the first token; the text it completes. `cache_keyword` names the model's KV cache
        argument and output (`cache_keyword_of`)."""
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([self.prompt_ids], device=device), use_cache=True,
                        **{cache_keyword: as_cache(None)}, **last_logits_only(model))  # fmt: skip
        self.cache = getattr(out, cache_keyword)
        return self.take(out.logits[0, -1])

    def decode(self, decoder: Decoder, device: torch.device) -> str:
        """One decode pass of this request alone (jupyter_serve/handlers/lm_decode.py) and
        its next token; the text it completes."""
        last = torch.tensor([self.generated[-1:]], device=device)
        position = torch.tensor([[self.cached]], device=device)
        logits, self.cache = decoder(last, position, None, as_cache(self.cache))
        return self.take(logits[0])

    @property
    def cached(self) -> int:
        """Positions in this request's KV cache: its prompt and the tokens fed back."""
        return len(self.prompt_ids) + len(self.generated) - 1 if self.cache is not None else 0

    def take(self, logits: torch.Tensor) -> str:
        """Choose the next token from its logits; the text it completes."""
        if self.request.adjusts_logits:
            logits = self.adjusted(logits)
        return self._take(choose_token(logits, self.request, self.generator))

    def adjusted(self, logits: torch.Tensor) -> torch.Tensor:
        """OpenAI's adjustments: `logits[j] + logit_bias[j] - count[j] * frequency_penalty
        - (count[j] > 0) * presence_penalty`, `count[j]` the times token j was generated in
        this answer (the prompt's tokens do not count), in float32."""
        if self.counts is None or self.bias is None:  # the first token: nothing generated
            self.counts = torch.zeros(logits.shape[-1], device=logits.device)
            self.bias = torch.zeros_like(self.counts)
            if self.request.logit_bias:
                tokens, biases = zip(*self.request.logit_bias, strict=True)
                self.bias[torch.tensor(tokens, device=logits.device)] = \
                    torch.tensor(biases, device=logits.device)  # fmt: skip
        request = self.request
        return logits.float() + self.bias - self.counts * request.frequency_penalty \
            - (self.counts > 0) * request.presence_penalty  # fmt: skip

    def _take(self, token: int) -> str:
        if token in self.end_ids:
            return self._end("stop")
        self.generated.append(token)
        if self.counts is not None:
            self.counts[token] += 1
        text, stopped = self.stops.feed(self.text.push(token))
        if stopped:
            self.finish_reason = "stop"
            return text
        if len(self.generated) >= self.max_new_tokens:
            return text + self._end("length")
        return text

    def _end(self, reason: str) -> str:
        """The text still held back, as the answer ends for `reason` (or at a stop sequence
        the held text completes)."""
        text, stopped = self.stops.feed(self.text.flush())
        self.finish_reason = "stop" if stopped else reason
        return text if stopped else text + self.stops.flush()


def cache_keyword_of(model: Any) -> str:
    """What the model's forward calls its KV cache: `cache` (transformers 5.24 on) or
    `past_key_values` (before; deprecated since)."""
    return "cache" if _forward_takes(model.__class__, "cache") else "past_key_values"


def last_logits_only(model: Any) -> dict[str, int]:
    """`logits_to_keep=1` where the model's forward takes it (as `generate()` passes it): a
    prompt's other positions' logits (a vocabulary each) are never read."""
    return {"logits_to_keep": 1} if _forward_takes(model.__class__, "logits_to_keep") else {}


@cache
def _forward_takes(model_class: Any, parameter: str) -> bool:
    """Whether a model class's forward has `parameter`: read once per class, not at every
    prompt (reading a signature through transformers' decorators costs tens of µs)."""
    return parameter in inspect.signature(model_class.forward).parameters


def choose_token(
    logits: torch.Tensor, request: GenerationRequest, generator: torch.Generator
) -> int:
    """The next token: the most likely at temperature 0, else sampled with top-p."""
    if request.temperature == 0.0:
        return int(torch.argmax(logits))
    scores = logits.float().cpu() / request.temperature
    probs = torch.softmax(scores, dim=-1)
    if request.top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        before = torch.cumsum(ordered, dim=-1) - ordered  # mass of the more likely tokens
        ordered[before >= request.top_p] = 0.0  # keep the smallest set reaching top_p
        probs = torch.zeros_like(probs).scatter(0, order, ordered)
    return int(torch.multinomial(probs, 1, generator=generator))
