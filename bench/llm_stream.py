"""A closed-loop client of OpenAI's streaming chat API, and what its answers measure.

`closed_loop(chat, conversations, concurrency, requests, max_tokens)` runs `concurrency`
clients, each on its own keep-alive HTTP/1.1 connection (raw asyncio streams, as
bench/loadgen.py), each sending its next `POST .../v1/chat/completions` (`stream: true`,
temperature 0) as soon as its last answer ended, the conversations taken in turn, until
`requests` were sent. Every server-sent event is timed as it arrives.

`summary(answers, references)` then gives, over the point:

* `tokens_per_s`: the completion tokens of all answers over the point's wall time (first
  request sent to last answer ended). A request's tokens are the `usage` its last event
  reports, else its number of text events;
* `ttft_p50_ms`/`ttft_p99_ms`: from sending a request to its first event with text;
* `itl_p50_ms`/`itl_p99_ms`: the gaps between an answer's successive text events (both
  servers send one event per token, unless a token does not yet complete a character);
  `tpot_p50_ms`: per answer, (last text - first text) / (tokens - 1);
* `same_as_generate`: how many answers are exactly the reference answer (in-process greedy
  `generate()`, bench/llm_local.py) of their conversation: both servers must do the same
  work for their figures to compare.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from continuous import percentile

READ_LIMIT = 300.0  # seconds: only a guard against an answer that never ends


@dataclass(frozen=True)
class Chat:
    """Where a server's chat completions are and what its requests carry."""

    url: str
    model: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class Answer:
    """One streamed answer: when it was sent and when each text event came."""

    conversation: int
    sent: float
    events: list[tuple[float, str]] = field(default_factory=list)
    ended: float = 0.0
    usage_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.events)

    @property
    def tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else len(self.events)


class Connection:
    """One keep-alive connection that streams one chat completion at a time."""

    def __init__(self, chat: Chat) -> None:
        self.chat = chat
        self.parts = urllib.parse.urlsplit(chat.url)
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    def request(self, messages: list[dict[str, str]], max_tokens: int) -> bytes:
        body = json.dumps({
            "model": self.chat.model, "messages": messages, "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
        }).encode()  # fmt: skip
        lines = [f"POST {self.parts.path} HTTP/1.1", f"Host: {self.parts.netloc}",
                 "Content-Type: application/json", f"Content-Length: {len(body)}",
                 *(f"{name}: {value}" for name, value in self.chat.headers)]  # fmt: skip
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    async def stream(self, answer: Answer, messages: list[dict[str, str]],
                     max_tokens: int) -> None:  # fmt: skip
        if self.streams is None:
            host, port = self.parts.hostname or "127.0.0.1", self.parts.port or 80
            self.streams = await asyncio.open_connection(host, port, limit=1 << 22)
        reader, writer = self.streams
        answer.sent = time.perf_counter()
        writer.write(self.request(messages, max_tokens))
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
        status = int(head.split(" ", 2)[1])
        if "transfer-encoding: chunked" not in head:
            length = int(head.split("content-length:")[1].split("\r\n")[0])
            body = await reader.readexactly(length)
            raise ValueError(f"status {status}: {body[:200]!r}")
        pending = b""
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            pending += (await reader.readexactly(size + 2))[:-2]
            now = time.perf_counter()
            *events, pending = pending.replace(b"\r\n", b"\n").split(b"\n\n")
            for event in events:
                _take(answer, event, now)
        await reader.readexactly(2)
        answer.ended = time.perf_counter()
        if status != 200:
            raise ValueError(f"status {status}")

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
        self.streams = None


def _take(answer: Answer, event: bytes, now: float) -> None:
    """One server-sent event of the answer."""
    data = b"".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
    if not data or data == b"[DONE]":
        return
    message: dict[str, Any] = json.loads(data)
    usage = message.get("usage") or {}
    if usage.get("completion_tokens") is not None:
        answer.usage_tokens = int(usage["completion_tokens"])
    for choice in message.get("choices") or []:
        text = (choice.get("delta") or {}).get("content")
        if text:
            answer.events.append((now, str(text)))
        answer.finish_reason = choice.get("finish_reason") or answer.finish_reason


async def closed_loop(chat: Chat, conversations: list[Any], concurrency: int, requests: int,
                      max_tokens: int) -> list[Answer]:  # fmt: skip
    """`concurrency` clients back to back until `requests` were sent (module docstring)."""
    answers: list[Answer] = []
    budget = iter(range(requests))

    async def client() -> None:
        connection = Connection(chat)
        for index in budget:
            answer = Answer(index % len(conversations), time.perf_counter())
            answers.append(answer)
            try:
                messages = conversations[answer.conversation]
                await asyncio.wait_for(connection.stream(answer, messages, max_tokens),
                                       READ_LIMIT)  # fmt: skip
            except (OSError, ValueError, asyncio.IncompleteReadError, TimeoutError) as exc:
                answer.error = f"{type(exc).__name__}: {exc}"
                answer.ended = time.perf_counter()
                connection.close()
        connection.close()

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return answers


def summary(answers: list[Answer], references: list[dict[str, Any]]) -> dict[str, Any]:
    """The point's figures (module docstring); latencies in ms."""
    good = [a for a in answers if a.error is None and a.finish_reason is not None]
    failed = [a for a in answers if a.error is not None or a.finish_reason is None]
    texts = [a for a in good if a.events]  # an answer may be tokens that decode to nothing
    wall = max(a.ended for a in answers) - min(a.sent for a in answers) if answers else 0.0
    tokens = sum(a.tokens for a in good)
    gaps = [later[0] - earlier[0] for a in texts
            for earlier, later in zip(a.events, a.events[1:], strict=False)]  # fmt: skip
    per_token = [(a.events[-1][0] - a.events[0][0]) / (a.tokens - 1) for a in texts if a.tokens > 1]
    events = sum(len(a.events) for a in good)
    return {
        "requests": len(answers), "ok": len(good), "errors": len(failed),
        "first_error": next((a.error or "no finish_reason" for a in failed), None),
        "seconds": round(wall, 3), "completion_tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1) if wall and good else None,
        "ttft_p50_ms": percentile([a.events[0][0] - a.sent for a in texts], 50),
        "ttft_p99_ms": percentile([a.events[0][0] - a.sent for a in texts], 99),
        "itl_p50_ms": percentile(gaps, 50), "itl_p99_ms": percentile(gaps, 99),
        "tpot_p50_ms": percentile(per_token, 50),
        "tokens_per_event": round(tokens / events, 3) if events else None,
        "same_as_generate": sum(a.text == references[a.conversation]["text"] for a in good),
        "finish_reasons": sorted({str(a.finish_reason) for a in good}),
    }  # fmt: skip
