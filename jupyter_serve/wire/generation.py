"""What a language-model request asks for: `GenerationRequest`, read and checked from a body.

One shape serves both doors of the `causal_lm` handler (jupyter_serve/handlers/causal_lm.py),
and both sides of the wire: the OpenAI routes check a request with it on the server before
it is queued, and the handler reads the same JSON in the worker.

* TorchServe clients post to `predictions/{model}` a JSON object
  `{"prompt": "...", "max_new_tokens": 32, "temperature": 0.7, "top_p": 0.9, "seed": 1,
  "stop": ["\\n\\n"]}` (or `"messages": [{"role", "content"}, ...]` for the chat
  template), or a plain-text body that is the prompt. OpenAI's `frequency_penalty`,
  `presence_penalty` (-2 to 2) and `logit_bias` (`{"token id": -100 to 100}`) mean what
  they mean there (jupyter_serve/handlers/lm_generation.py applies them). Absent
  `temperature` is greedy decoding, as `generate()` defaults. The answer streams the text
  as it is decoded.
* The OpenAI routes (jupyter_serve/server/http/openai.py) translate a completion request
  into the same object with `"details": true` (`to_json`): each chunk is then a JSON
  object with the text, the finish reason and the token counts the routes need.

Every check that needs no tokenizer lives here (stdlib only, bounded: at most
MAX_MESSAGES messages, MAX_STOP stop sequences); `RequestError` carries the OpenAI
`param` and `code` the routes report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_MESSAGES",
    "MAX_STOP",
    "ROLES",
    "GenerationRequest",
    "RequestError",
    "from_object",
    "read_request",
]

ROLES = ("system", "user", "assistant", "developer", "tool")
MAX_STOP = 4  # OpenAI's limit on stop sequences
MAX_STOP_CHARS = 256
MAX_MESSAGES = 1024
MAX_LOGIT_BIAS = 300  # tokens a logit_bias may name
MAX_PENALTY = 2.0  # OpenAI's range for presence and frequency penalties: -2 to 2
MAX_BIAS = 100.0  # and for a logit bias: -100 to 100


class RequestError(ValueError):
    """A request the handler refuses (400), with the field at fault and OpenAI's code."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def to_json(self) -> dict[str, Any]:
        """TorchServe's error JSON, with the OpenAI `param` and `code` beside it."""
        return {"code": 400, "type": "InvalidRequest", "message": self.message,
                "param": self.param, "error_code": self.code}  # fmt: skip


@dataclass(frozen=True)
class GenerationRequest:
    """One generation: a prompt or chat messages, and how to sample."""

    prompt: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    max_new_tokens: int | None = None  # None: up to the context window
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias), by token id
    details: bool = False  # chunks as JSON objects (the OpenAI routes)

    @property
    def adjusts_logits(self) -> bool:
        """Whether penalties or biases change the logits before a token is chosen."""
        return bool(self.frequency_penalty or self.presence_penalty or self.logit_bias)

    def to_json(self) -> dict[str, Any]:
        """The JSON body `read_request` reads back as this request."""
        body: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p,
                                "stop": list(self.stop), "details": self.details}  # fmt: skip
        if self.prompt is not None:
            body["prompt"] = self.prompt
        if self.messages is not None:
            body["messages"] = [dict(message) for message in self.messages]
        if self.max_new_tokens is not None:
            body["max_new_tokens"] = self.max_new_tokens
        if self.seed is not None:
            body["seed"] = self.seed
        if self.frequency_penalty:
            body["frequency_penalty"] = self.frequency_penalty
        if self.presence_penalty:
            body["presence_penalty"] = self.presence_penalty
        if self.logit_bias:
            body["logit_bias"] = {str(token): bias for token, bias in self.logit_bias}
        return body


def read_request(row: Mapping[str, Any]) -> GenerationRequest:
    """The request in a handler's data row (its "body", else its form fields)."""
    body = row.get("body", row.get("data", row))
    if isinstance(body, (bytes, bytearray)):
        body = _bytes_body(bytes(body))
    if isinstance(body, str):
        return GenerationRequest(prompt=body)
    if not isinstance(body, Mapping):
        raise RequestError("The body must be a JSON object or the prompt as text.")
    return from_object(body)


def _bytes_body(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError("The body is not UTF-8 text.") from None
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            raise RequestError("The body is not valid JSON.") from None
    return text


def from_object(body: Mapping[str, Any]) -> GenerationRequest:
    """The request a JSON object asks for (`RequestError` for what it may not ask)."""
    prompt, messages = body.get("prompt"), body.get("messages")
    if (prompt is None) == (messages is None):
        raise RequestError("Give either 'prompt' or 'messages'.", "prompt")
    return GenerationRequest(
        prompt=None if prompt is None else _prompt(prompt),
        messages=None if messages is None else _messages(messages),
        max_new_tokens=_max_tokens(body),
        temperature=_number(body, "temperature", 0.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, open_low=True),
        seed=_seed(body.get("seed")),
        stop=_stop(body.get("stop")),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -MAX_PENALTY, MAX_PENALTY),
        presence_penalty=_number(body, "presence_penalty", 0.0, -MAX_PENALTY, MAX_PENALTY),
        logit_bias=_logit_bias(body.get("logit_bias")),
        details=body.get("details") is True,
    )


def _prompt(prompt: Any) -> str:
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]  # OpenAI accepts a list of prompts; one is one
    if not isinstance(prompt, str):
        raise RequestError("'prompt' must be a string.", "prompt")
    return _unicode(prompt, "prompt")


def _messages(messages: Any) -> tuple[dict[str, str], ...]:
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of messages.", "messages")
    if len(messages) > MAX_MESSAGES:
        raise RequestError(f"At most {MAX_MESSAGES} messages.", "messages")
    return tuple(_message(message, idx) for idx, message in enumerate(messages))


def _message(message: Any, idx: int) -> dict[str, str]:
    where = f"messages[{idx}]"
    if not isinstance(message, Mapping):
        raise RequestError(f"{where} must be an object with 'role' and 'content'.", where)
    role = message.get("role")
    if role not in ROLES:
        raise RequestError(f"{where}.role must be one of {', '.join(ROLES)}; got {role!r:.40}.",
                           f"{where}.role")  # fmt: skip
    content = message.get("content")
    if content is None and role != "assistant":  # an assistant's may be only tool calls
        raise RequestError(f"{where}.content is required for the {role} role.",
                           f"{where}.content")  # fmt: skip
    return {"role": "system" if role == "developer" else str(role),
            "content": _content(content, where)}  # fmt: skip


def _content(content: Any, where: str) -> str:
    """A message's text: a string, or OpenAI's list of `{"type": "text", "text"}` parts."""
    if isinstance(content, str):
        return _unicode(content, f"{where}.content")
    if content is None:
        return ""
    if isinstance(content, list) and all(_is_text_part(part) for part in content):
        return _unicode("".join(str(part["text"]) for part in content), f"{where}.content")
    raise RequestError(f"{where}.content must be text (a string or text parts).",
                       f"{where}.content")  # fmt: skip


def _is_text_part(part: Any) -> bool:
    return isinstance(part, Mapping) and part.get("type") == "text" and \
        isinstance(part.get("text"), str)  # fmt: skip


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    for name in ("max_new_tokens", "max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise RequestError(f"'{name}' must be an integer of at least 1; got {value!r:.40}.",
                               name, "invalid_value")  # fmt: skip
        return value
    return None


def _number(body: Mapping[str, Any], name: str, default: float, low: float, high: float,
            open_low: bool = False) -> float:  # fmt: skip
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not math.isfinite(value)):  # fmt: skip
        raise RequestError(f"'{name}' must be a number; got {value!r:.40}.", name)
    if value > high or value < low or (open_low and value == low):
        side = "above" if open_low else "at least"
        raise RequestError(f"'{name}' must be {side} {low:g} and at most {high:g}.", name,
                           "invalid_value")  # fmt: skip
    return float(value)


def _seed(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestError("'seed' must be an integer.", "seed")
    return value % 2**63


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise RequestError("'stop' must be a string or a list of non-empty strings.", "stop")
    if len(stops) > MAX_STOP or any(len(s) > MAX_STOP_CHARS for s in stops):
        raise RequestError(f"'stop' takes at most {MAX_STOP} sequences of at most "
                           f"{MAX_STOP_CHARS} characters.", "stop")  # fmt: skip
    return tuple(_unicode(stop, "stop") for stop in stops)


def _unicode(text: str, param: str) -> str:
    """`text`, refused when it holds an unpaired surrogate (JSON lets a client send
    "\\ud800"), which no tokenizer takes and no UTF-8 answer can carry."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise RequestError(f"'{param}' is not valid Unicode (an unpaired surrogate).",
                               param) from None  # fmt: skip
    return text


def _logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    """OpenAI's `{"token id": bias}` (ids as strings, as JSON keys are), sorted by id."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise RequestError("'logit_bias' must map token ids to biases.", "logit_bias")
    if len(value) > MAX_LOGIT_BIAS:
        raise RequestError(f"'logit_bias' takes at most {MAX_LOGIT_BIAS} tokens.", "logit_bias")
    biases: dict[int, float] = {}
    for key, bias in value.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) < 12):
            raise RequestError(f"'logit_bias' keys must be token ids; got {key!r:.40}.",
                               "logit_bias")  # fmt: skip
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or \
                not -MAX_BIAS <= bias <= MAX_BIAS:  # fmt: skip
            raise RequestError(f"'logit_bias' values must be numbers from {-MAX_BIAS:g} to "
                               f"{MAX_BIAS:g}; got {bias!r:.40}.", "logit_bias",
                               "invalid_value")  # fmt: skip
        biases[int(key)] = float(bias)
    return tuple(sorted(biases.items()))
