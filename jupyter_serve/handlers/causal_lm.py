"""`CausalLM`: the built-in handler `causal_lm`, a Hugging Face causal language model.

The model folder is what `save_pretrained` writes for a causal LM and its tokenizer
(config.json, model.safetensors, tokenizer.json, tokenizer_config.json, its chat
template...), packed as the archive's extra files:

    jupyter-serve-archiver --model-name tinylm --version 1.0 --handler causal_lm \\
        --extra-files config.json,model.safetensors,tokenizer.json,...

Requests are read by jupyter_serve/wire/generation.py (a prompt or chat messages,
`max_new_tokens`, `temperature`, `top_p`, `seed`, `stop`, OpenAI's penalties and
`logit_bias`). With continuous batching (on by
default for this handler, server/models.py) each call is one step of every running
request: a new request is tokenized (its chat template applied) and prefilled (beside
others that join with it, one group of similar prompts a step, the cheapest first:
jupyter_serve/handlers/lm_prefill.py; one still waiting answers an empty chunk; a group of
at least `BURST_POSITIONS` padded positions runs on the worker's burst threads, its context's
`torch_burst_threads`: jupyter_serve/server/pool/cores.py), a running
one decodes one token against its own KV cache (jupyter_serve/handlers/lm_generation.py),
the running ones in one decode pass (jupyter_serve/handlers/lm_batch.py; for a Llama model
without its forward's per-call work, jupyter_serve/handlers/lm_decode.py), and each answers
that step's text as one chunk; a request stays while its generation goes on
(`context.stopping_criteria`). A request the server no longer sends (its client left) is
forgotten at once. With `continuousBatching: false` a call runs its batch to the
end, streaming each step (`send_intermediate_predict_response`).

A chunk is the text as it is decoded (UTF-8; never half a character), or, for a request
with `"details": true` (the OpenAI routes), a JSON object
`{"text", "finish_reason", "prompt_tokens", "completion_tokens"}` on a line of its own
(`application/x-ndjson`). A request the handler
refuses (bad fields, a prompt past the context window) gets a 400 with TorchServe's error
JSON plus OpenAI's `param` and `error_code`; so does an empty prompt (one that
tokenizes to nothing: a tokenizer that adds a BOS token makes "" a one-token prompt),
which the other requests of its batch never notice.

`handler:` options in model-config.yaml: `dtype` ("float32", "bfloat16", "float16"),
`max_prompt_chars` (longer prompts are refused before tokenizing, default 64 characters
per token of the context window).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch

from jupyter_serve.handlers.lm_batch import DecodeBatch
from jupyter_serve.handlers.lm_decode import decoder_for
from jupyter_serve.handlers.lm_generation import Generation, cache_keyword_of
from jupyter_serve.handlers.lm_prefill import (
    first_group,
    padded_positions,
    prefill_groups,
    prefill_together,
)
from jupyter_serve.wire.generation import GenerationRequest, RequestError, read_request
from jupyter_serve.worker.streaming import send_intermediate_predict_response

__all__ = ["CausalLM", "context_window", "device_for", "torch_threads"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CHARS_PER_TOKEN_BOUND = 64
BURST_POSITIONS = 128  # a prefill this large (padded) runs on the worker's burst threads
TEXT_TYPE = "text/plain; charset=utf-8"
DETAILS_TYPE = "application/x-ndjson"


def device_for(gpu_id: Any, cuda_available: bool) -> torch.device:
    """The worker's GPU (`gpu_id` of its context: CUDA_VISIBLE_DEVICES names one) if
    there is one, else the CPU."""
    if gpu_id is None or not cuda_available:
        return torch.device("cpu")
    return torch.device(f"cuda:{int(gpu_id)}")


def context_window(config: Any, tokenizer: Any) -> int:
    """The longest sequence the model takes: its config's positions, else the tokenizer's."""
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return int(min(getattr(tokenizer, "model_max_length", 2048), 1 << 20))


class CausalLM:
    """Serves a causal LM folder, step by step (module docstring)."""

    def __init__(self) -> None:
        self.generations: dict[str, Generation] = {}
        self.batch = DecodeBatch()
        self.initialized = False

    def initialize(self, context: Any) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging

        hf_logging: Any = logging  # untyped functions
        hf_logging.disable_progress_bar()  # a bar per load would fill the worker's log
        properties = context.system_properties
        config = context.model_yaml_config or {}
        options = config.get("handler") or {}
        folder = properties["model_dir"]
        self.device = device_for(properties.get("gpu_id"), torch.cuda.is_available())
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        dtype = DTYPES.get(str(options.get("dtype", "float32")), torch.float32)
        model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
        self.model = model.to(self.device).eval()
        self.window = context_window(self.model.config, self.tokenizer)
        self.vocabulary = int(getattr(self.model.config, "vocab_size", 0) or len(self.tokenizer))
        self.cache_keyword = cache_keyword_of(self.model)
        self.decoder = decoder_for(self.model, self.cache_keyword)
        self.max_prompt_chars = int(options.get("max_prompt_chars",
                                                CHARS_PER_TOKEN_BOUND * self.window))  # fmt: skip
        self.end_ids = self._end_ids()
        self.continuous = config.get("continuousBatching", True) is not False
        self.burst_threads = getattr(context, "torch_burst_threads", None)  # None: TorchServe
        self.initialized = True

    def _end_ids(self) -> frozenset[int]:
        found: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.model.config,
                       self.tokenizer):  # fmt: skip
            value = getattr(source, "eos_token_id", None)
            found.update([value] if isinstance(value, int) else value or [])
        return frozenset(found)

    # ---- a call ----

    def handle(self, data: Sequence[Mapping[str, Any]], context: Any) -> list[bytes]:
        ids = [str(context.get_request_id(idx)) for idx in range(len(data))]
        if self.continuous:
            return self.step(data, ids, context)
        return self.whole(data, ids, context)

    def step(self, data: Sequence[Mapping[str, Any]], ids: list[str], context: Any) -> list[bytes]:
        """One step of every running request; new ones join (module docstring)."""
        for gone in set(self.generations) - set(ids):
            del self.generations[gone]  # its client left: the server no longer sends it
        chunks: list[bytes] = [b""] * len(ids)
        criteria: list[Callable[[Any], bool | None]] = [_plain] * len(ids)
        stepping: dict[int, Generation] = {}
        for idx, (row, request_id) in enumerate(zip(data, ids, strict=True)):
            generation = self.generations.get(request_id)
            if generation is None:
                try:
                    generation = self.generations[request_id] = self.start(row)
                except RequestError as error:
                    chunks[idx] = self.refuse(error, idx, context)
                    continue
            criteria[idx] = partial(self._ends, request_id, generation.cache is None)
            stepping[idx] = generation
        early = partial(self._send_early, stepping, ids, context)
        for idx, text in self.advance(stepping, early).items():
            chunks[idx] = _chunk(stepping[idx], text)
            context.set_response_content_type(idx, _content_type(stepping[idx]))
        context.stopping_criteria = criteria
        return chunks

    def _send_early(self, stepping: Mapping[int, Generation], ids: list[str], context: Any,
                    texts: dict[int, str]) -> None:  # fmt: skip
        """New requests' first texts, streamed before the running ones' decode pass: their
        first token comes a pass sooner (TorchServe's intermediate response)."""
        chunks = {idx: _chunk(stepping[idx], text) for idx, text in texts.items() if text}
        for idx in chunks:
            context.set_response_content_type(idx, _content_type(stepping[idx]))
        going = {idx: ids[idx] for idx in chunks}
        send_intermediate_predict_response(chunks, going, "Intermediate", 200, context)

    def whole(self, data: Sequence[Mapping[str, Any]], ids: list[str], context: Any) -> list[bytes]:
        """Every request of the batch to its end, each step streamed but the last."""
        running: dict[int, Generation] = {}
        chunks: list[bytes] = [b""] * len(ids)
        for idx, row in enumerate(data):
            try:
                running[idx] = self.start(row)
            except RequestError as error:
                chunks[idx] = self.refuse(error, idx, context)
        while True:
            going = {idx: g for idx, g in running.items() if g.finish_reason is None}
            for idx, text in self.advance(going).items():
                chunks[idx] = _chunk(running[idx], text)
                context.set_response_content_type(idx, _content_type(running[idx]))
            if all(generation.finish_reason for generation in running.values()):
                return chunks
            going_ids = {idx: ids[idx] for idx, g in running.items() if g.finish_reason is None}
            send_intermediate_predict_response(chunks, going_ids, "Intermediate", 200, context)

    def advance(
        self, generations: Mapping[int, Generation],
        early: Callable[[dict[int, str]], None] | None = None,
    ) -> dict[int, str]:  # fmt: skip
        """One token of each generation, and the text it completes: new ones run their
        prompts (together when several join, lm_prefill.py), running ones decode together
        (lm_batch.py) unless one runs alone. `early` gets the new ones' first texts as soon
        as their prompts ran, when running ones still decode (their texts are then "")."""
        decoding = {idx: g for idx, g in generations.items() if g.cache is not None}
        if len(decoding) < 2:
            self.batch.release()  # a sequence stepping alone needs its own cache
        texts = self._prefill({idx: g for idx, g in generations.items() if idx not in decoding})
        if early is not None and decoding and any(texts.values()):
            early(texts)
            texts = dict.fromkeys(texts, "")
        if len(decoding) == 1:
            ((idx, alone),) = decoding.items()
            texts[idx] = alone.decode(self.decoder, self.device)
        if len(decoding) > 1:
            logits = self.batch.decode(self.decoder, list(decoding.values()), self.device)
            for row, (idx, generation) in enumerate(decoding.items()):
                texts[idx] = generation.take(logits[row])
        return texts

    def _prefill(self, new: Mapping[int, Generation]) -> dict[int, str]:
        """The first token's text of the new generations of the group prefilled this step
        (the cheapest, lm_prefill.py); "" for the others, which wait for a next step."""
        row_of = {id(generation): idx for idx, generation in new.items()}
        groups = prefill_groups(list(new.values()))
        if not groups:
            return {}
        texts = dict.fromkeys(new, "")
        group = groups[first_group(groups)]
        heavy = padded_positions(group) >= BURST_POSITIONS
        with torch_threads(self.burst_threads if heavy else None):
            if len(group) == 1:
                texts[row_of[id(group[0])]] = group[0].prefill(self.model, self.device,
                                                                self.cache_keyword)  # fmt: skip
                return texts
            logits = prefill_together(self.model, group, self.device, self.cache_keyword)
        for row, generation in enumerate(group):
            texts[row_of[id(generation)]] = generation.take(logits[row])
        return texts

    def start(self, row: Mapping[str, Any]) -> Generation:
        """A new request's generation, its prompt tokenized and checked against the window."""
        request = read_request(row)
        prompt_ids = self.prompt_ids(request)
        if not prompt_ids:
            raise _empty(request)
        beyond = [token for token, _ in request.logit_bias if token >= self.vocabulary]
        if beyond:
            raise RequestError(f"'logit_bias' names token {beyond[0]}, past this model's "
                               f"{self.vocabulary} tokens.", "logit_bias")  # fmt: skip
        room = self.window - len(prompt_ids)
        wanted = request.max_new_tokens
        if room < 1 or (wanted is not None and wanted > room):
            where = "messages" if request.messages is not None else "prompt"
            asked = f" and {wanted} in the completion" if wanted is not None else ""
            raise RequestError(
                f"This model's maximum context length is {self.window} tokens. However, you "
                f"requested {len(prompt_ids) + (wanted or 1)} tokens ({len(prompt_ids)} in "
                f"the {where}{asked}). Please reduce the length of the {where}.",
                where, "context_length_exceeded",
            )  # fmt: skip
        return Generation(request, prompt_ids, wanted or room, self.tokenizer, self.end_ids)

    def prompt_ids(self, request: GenerationRequest) -> list[int]:
        """The prompt's tokens: the chat template over the messages, or the prompt text."""
        if request.messages is not None:
            if sum(len(m["content"]) for m in request.messages) > self.max_prompt_chars:
                raise _too_long("messages", self.window)
            if not getattr(self.tokenizer, "chat_template", None):
                raise RequestError("This model has no chat template: use completions with a "
                                   "prompt.", "messages")  # fmt: skip
            encoded: Any = self.tokenizer.apply_chat_template(
                list(request.messages), add_generation_prompt=True, tokenize=True
            )
            ids: Any = encoded["input_ids"] if isinstance(encoded, Mapping) else encoded
            return [int(token) for token in ids]
        assert request.prompt is not None
        if len(request.prompt) > self.max_prompt_chars:
            raise _too_long("prompt", self.window)
        return [int(token) for token in self.tokenizer(request.prompt)["input_ids"]]

    def refuse(self, error: RequestError, idx: int, context: Any) -> bytes:
        context.set_response_status(400, "Bad Request", idx)
        context.set_response_content_type(idx, "application/json")
        return json.dumps(error.to_json()).encode()

    def _ends(self, request_id: str, first: bool, _item: Any) -> bool | None:
        """Whether the request's answer ends with this step (None: it is one plain answer)."""
        generation = self.generations.get(request_id)
        if generation is None or generation.finish_reason is None:
            return False
        del self.generations[request_id]
        return None if first else True


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """torch's threads raised to `count` for the block, then back (never lowered)."""
    steady = torch.get_num_threads()
    if not count or count <= steady:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(steady)


def _plain(_item: Any) -> None:
    return None


def _too_long(where: str, window: int) -> RequestError:
    return RequestError(f"This model's maximum context length is {window} tokens; the "
                        f"{where} is far longer.", where, "context_length_exceeded")  # fmt: skip


def _empty(request: GenerationRequest) -> RequestError:
    """An empty prompt (or chat messages that render to no token): a client's mistake,
    refused before anything runs, as no model continues from nothing."""
    if request.messages is not None:
        return RequestError("The messages make an empty prompt (no token): the model needs "
                            "at least one token to continue.", "messages")  # fmt: skip
    return RequestError("The prompt is empty: the model needs at least one token to "
                        "continue.", "prompt")  # fmt: skip


def _chunk(generation: Generation, text: str) -> bytes:
    """A step's chunk: its text, or with details one JSON line."""
    if not generation.request.details:
        return text.encode()
    return json.dumps({
        "text": text, "finish_reason": generation.finish_reason,
        "prompt_tokens": generation.prompt_tokens,
        "completion_tokens": generation.completion_tokens,
    }).encode() + b"\n"  # fmt: skip


def _content_type(generation: Generation) -> str:
    return DETAILS_TYPE if generation.request.details else TEXT_TYPE
