"""`%serve chat MODEL "prompt"`: a language model's answer streamed into the cell as it comes.

It posts to the server's OpenAI-compatible `serve/v1/chat/completions` with `stream: true`
(jupyter_serve/server/http/openai.py) over the kernel's plain HTTP client, writes each
text delta to the cell's output the moment its event arrives, then one line of figures:
tokens, time to first token, tokens per second. Standard library only, as the rest of the
kernel side.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from jupyter_serve.kernel.client import ServeClient

__all__ = ["ChatAnswer", "chat", "events"]

ROUTE = "v1/chat/completions"


@dataclass
class ChatAnswer:
    """What came back: the text, why it ended, and how fast."""

    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int = 0
    prompt_tokens: int = 0
    first_token_s: float | None = None
    seconds: float = 0.0
    deltas: list[str] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        """Completion tokens after the first one, over the time after it (the decode rate)."""
        if self.first_token_s is None or self.completion_tokens < 2:
            return 0.0
        decoding = self.seconds - self.first_token_s
        return (self.completion_tokens - 1) / decoding if decoding > 0 else 0.0

    def figures(self) -> str:
        first = "-" if self.first_token_s is None else f"{self.first_token_s * 1000:.0f} ms"
        return (f"[{self.completion_tokens} tokens ({self.finish_reason}) · first token "
                f"{first} · {self.tokens_per_second:.1f} tokens/s]")  # fmt: skip


def events(lines: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON objects of server-sent events (`data: {...}`), until `data: [DONE]`."""
    for raw in lines:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[len(b"data:") :].strip()
        if data == b"[DONE]":
            return
        yield json.loads(data)


def chat(
    client: ServeClient,
    model: str,
    prompt: str,
    *,
    system: str | None = None,
    out: TextIO | None = None,
    **sampling: Any,
) -> ChatAnswer:
    """Stream `model`'s answer to `prompt` to `out` (the cell's stdout); return it."""
    out = out or sys.stdout
    messages = ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": prompt}]  # fmt: skip
    body = {"model": model, "messages": messages, "stream": True,
            "stream_options": {"include_usage": True},
            **{k: v for k, v in sampling.items() if v is not None}}  # fmt: skip
    answer = ChatAnswer()
    began = time.perf_counter()
    for event in events(client.stream_lines("POST", ROUTE, body)):
        _take(answer, event, out, began)
    answer.seconds = time.perf_counter() - began
    out.write("\n" + answer.figures() + "\n")
    out.flush()
    return answer


def _take(answer: ChatAnswer, event: dict[str, Any], out: TextIO, began: float) -> None:
    usage = event.get("usage")
    if usage:
        answer.prompt_tokens = int(usage.get("prompt_tokens", 0))
        answer.completion_tokens = int(usage.get("completion_tokens", 0))
    for choice in event.get("choices") or []:
        text = (choice.get("delta") or {}).get("content") or ""
        if text:
            if answer.first_token_s is None:
                answer.first_token_s = time.perf_counter() - began
            answer.deltas.append(text)
            answer.text += text
            out.write(text)
            out.flush()
        answer.finish_reason = choice.get("finish_reason") or answer.finish_reason
