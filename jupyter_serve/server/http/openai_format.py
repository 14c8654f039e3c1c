"""OpenAI's JSON, both ways: a completion request read into a `GenerationRequest`, and the
objects the answers are made of (completions, chat completions, their streamed chunks,
usage, errors). No I/O here: server/http/openai.py routes and writes.

Requests: `model` ("name" or "name/version"), `prompt` (completions) or `messages` (chat),
`max_tokens` / `max_completion_tokens` (completions: OpenAI's default 16; chat: up to the
context window), `temperature` (OpenAI's default 1), `top_p`, `seed`, `stop`,
`frequency_penalty`, `presence_penalty`, `logit_bias`, `stream`,
`stream_options.include_usage` and `n` (1 only). Fields that would change the answer but
are not supported (`n` > 1, `logprobs`, `echo`, `best_of` > 1, `suffix`, `tools`, a
`response_format` other than text, a `tool_choice` or `function_call` other than "none")
are refused with a 400 naming them rather than ignored; their defaults are accepted.
Others are ignored.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_serve.wire.errors import BadRequest
from jupyter_serve.wire.generation import GenerationRequest, RequestError, from_object

__all__ = ["Answer", "OpenAIBadRequest", "OpenAIRequest", "error_json", "read_openai"]

UNSUPPORTED = ("logprobs", "top_logprobs", "echo", "suffix", "tools", "functions")
NO_TOOLS = ("tool_choice", "function_call")  # only "none" (their default without tools)
PASSED_ON = ("max_tokens", "max_completion_tokens", "top_p", "seed", "stop",
             "frequency_penalty", "presence_penalty", "logit_bias")  # fmt: skip
DEFAULT_TEMPERATURE = 1.0  # OpenAI's
DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's (and vLLM's) for legacy completions, not chat


class OpenAIBadRequest(BadRequest):
    """A 400 with OpenAI's `param` and `code`."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code

    def with_status(self, status: int) -> OpenAIBadRequest:
        """This error answered with `status` instead (a handler's, or a 404)."""
        self.status_code = status  # type: ignore[misc]
        return self


@dataclass(frozen=True)
class OpenAIRequest:
    """A checked completion request: which model, what to generate, how to answer."""

    model: str  # as the client named it, echoed in answers
    name: str
    version: str | None
    generation: GenerationRequest
    chat: bool
    stream: bool
    include_usage: bool


def read_openai(body: Any, chat: bool) -> OpenAIRequest:
    """`body` (parsed JSON) as a request, or an `OpenAIBadRequest`."""
    if not isinstance(body, Mapping):
        raise OpenAIBadRequest("The body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip("/"):
        raise OpenAIBadRequest("'model' must name a served model.", "model")
    _refuse_unsupported(body)
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise OpenAIBadRequest("'stream' must be true or false.", "stream")
    options = body.get("stream_options")
    if options is not None and not stream:
        raise OpenAIBadRequest("'stream_options' is only allowed when 'stream' is true.",
                               "stream_options")  # fmt: skip
    options = options or {}
    if not isinstance(options, Mapping):
        raise OpenAIBadRequest("'stream_options' must be an object.", "stream_options")
    fields = {name: body.get(name) for name in PASSED_ON}
    if not chat and fields["max_tokens"] is None and fields["max_completion_tokens"] is None:
        fields["max_tokens"] = DEFAULT_COMPLETION_TOKENS  # as if asked: past the window, a 400
    fields["temperature"] = body.get("temperature", DEFAULT_TEMPERATURE)
    fields["messages" if chat else "prompt"] = body.get("messages" if chat else "prompt")
    try:
        generation = from_object({**fields, "details": True})
    except RequestError as error:
        raise OpenAIBadRequest(error.message, error.param, error.code) from None
    name, _, version = model.partition("/")
    return OpenAIRequest(model, name, version or None, generation, chat, stream,
                         include_usage=options.get("include_usage") is True)  # fmt: skip


def _refuse_unsupported(body: Mapping[str, Any]) -> None:
    for name in ("n", "best_of"):
        value = body.get(name)
        if value is not None and value != 1:
            raise OpenAIBadRequest(f"Only {name}=1 is supported.", name, "invalid_value")
    for name in UNSUPPORTED:
        if body.get(name) not in (None, False, [], ""):
            raise OpenAIBadRequest(f"'{name}' is not supported by this server.", name)
    for name in NO_TOOLS:
        if body.get(name) not in (None, "none"):
            raise OpenAIBadRequest(f"'{name}' may only be \"none\": this server calls no "
                                   "tools.", name)  # fmt: skip
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise OpenAIBadRequest("Only 'response_format' {\"type\": \"text\"} is supported: this "
                               "server does not constrain the output to JSON.",
                               "response_format")  # fmt: skip


class Answer:
    """One answer's OpenAI objects: its id, timestamps, and usage once known."""

    def __init__(self, request: OpenAIRequest, request_id: str) -> None:
        self.request = request
        self.id = f"{'chatcmpl' if request.chat else 'cmpl'}-{request_id.replace('-', '')}"
        self.created = int(time.time())
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def usage(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}  # fmt: skip

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created,
                "model": self.request.model}  # fmt: skip

    def chunk(self, text: str | None, finish_reason: str | None) -> dict[str, Any]:
        """A streamed chunk (text None: the chat's first, which names the role)."""
        if self.request.chat:
            delta = {"role": "assistant", "content": ""} if text is None else {"content": text}
            choice: dict[str, Any] = {"index": 0, "delta": delta}
            head = self._head("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text or ""}
            head = self._head("text_completion")
        choice.update(logprobs=None, finish_reason=finish_reason)
        body = {**head, "choices": [choice]}
        if self.request.include_usage:
            body["usage"] = None
        return body

    def last_chunk(self, finish_reason: str | None) -> dict[str, Any]:
        """The streamed chunk with the finish reason: no text (chat: an empty delta)."""
        body = self.chunk("", finish_reason)
        if self.request.chat:
            body["choices"][0]["delta"] = {}
        return body

    def usage_chunk(self) -> dict[str, Any]:
        """The last streamed chunk with `stream_options.include_usage`: no choices, usage."""
        kind = "chat.completion.chunk" if self.request.chat else "text_completion"
        return {**self._head(kind), "choices": [], "usage": self.usage()}

    def whole(self, text: str, finish_reason: str | None) -> dict[str, Any]:
        """The answer when not streamed."""
        if self.request.chat:
            message = {"role": "assistant", "content": text}
            choice: dict[str, Any] = {"index": 0, "message": message}
            head = self._head("chat.completion")
        else:
            choice = {"index": 0, "text": text}
            head = self._head("text_completion")
        choice.update(logprobs=None, finish_reason=finish_reason)
        return {**head, "choices": [choice], "usage": self.usage()}


_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "invalid_request_error", 413: "invalid_request_error",
          429: "rate_limit_error"}  # fmt: skip


def error_json(status: int, message: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:  # fmt: skip
    """OpenAI's error object for an answer with `status`."""
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
