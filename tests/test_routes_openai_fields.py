"""The OpenAI routes' request fields with the official `openai` client: those that change
the answer are applied as OpenAI defines them (penalties, logit_bias) or refused with a
400 naming them (JSON output, tool calls), never silently ignored; their defaults are
accepted, `max_tokens`'s too (16 on completions, as OpenAI's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from lm_models import greedy, prompt_ids, tiny_lm
from test_routes_openai import CHAT, JSON, PROMPT, client_for, jp_server_config, serve_lm

__all__ = ["client_for", "jp_server_config", "tiny_lm"]

PENALTIES: dict[str, Any] = {"frequency_penalty": 1.5, "presence_penalty": 0.5,
                             "logit_bias": {"300": 3.5, "311": -100}}  # fmt: skip


async def test_penalties_and_logit_bias_are_openai_s(
    jp_serverapp: Any, tiny_lm: Path, client_for: Any
) -> None:
    """Against generate() with a logits processor written from OpenAI's definition."""
    await serve_lm(jp_serverapp, tiny_lm)
    async with client_for() as client:
        chat = await client.chat.completions.create(
            model="tinylm", messages=CHAT, max_tokens=12, temperature=0, **PENALTIES
        )
        completion = await client.completions.create(
            model="tinylm", prompt=PROMPT, max_tokens=12, temperature=0, presence_penalty=1
        )
    assert chat.choices[0].message.content == greedy(tiny_lm, 12, messages=CHAT, **PENALTIES)
    assert chat.choices[0].message.content != greedy(tiny_lm, 12, messages=CHAT)
    assert completion.choices[0].text == greedy(tiny_lm, 12, prompt=PROMPT, presence_penalty=1)
    assert completion.choices[0].text != greedy(tiny_lm, 12, prompt=PROMPT)


async def test_default_values_are_accepted(
    jp_serverapp: Any, tiny_lm: Path, client_for: Any
) -> None:
    await serve_lm(jp_serverapp, tiny_lm)
    async with client_for() as client:
        chat = await client.chat.completions.create(
            model="tinylm", messages=CHAT, max_tokens=6, temperature=0, frequency_penalty=0,
            presence_penalty=0, logit_bias={}, response_format={"type": "text"},
            tool_choice="none", extra_body={"function_call": None},
        )  # fmt: skip
    assert chat.choices[0].message.content == greedy(tiny_lm, 6, messages=CHAT)


ASKED = {"chat/completions": {"messages": CHAT}, "completions": {"prompt": PROMPT}}
REFUSED = [
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}},
     "response_format"),
    ({"response_format": "text"}, "response_format"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ({"function_call": "auto"}, "function_call"),
    ({"presence_penalty": 5}, "presence_penalty"),
    ({"frequency_penalty": -2.5}, "frequency_penalty"),
    ({"frequency_penalty": "high"}, "frequency_penalty"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"logit_bias": {"1": 101}}, "logit_bias"),
    ({"logit_bias": {"512": 1}}, "logit_bias"),  # past the vocabulary: the worker's check
    ({"stream_options": {"include_usage": True}}, "stream_options"),  # without stream
    ({"stream": False, "stream_options": {}}, "stream_options"),
]  # fmt: skip


async def test_fields_that_would_change_the_answer_are_refused(
    jp_fetch: Any, jp_serverapp: Any, tiny_lm: Path
) -> None:
    """Each a 400 with OpenAI's error naming the field, on chat and completions."""
    await serve_lm(jp_serverapp, tiny_lm)
    for fields, param in REFUSED:
        for route, asked in ASKED.items():
            body = {"model": "tinylm", "max_tokens": 2, **asked, **fields}
            answer = await jp_fetch("serve", "v1", *route.split("/"), method="POST",
                                    raise_error=False, body=json.dumps(body),
                                    headers=dict(JSON))  # fmt: skip
            assert answer.code == 400, (body, answer.body)
            error = json.loads(answer.body)["error"]
            assert (error["type"], error["param"]) == ("invalid_request_error", param), body


async def test_the_client_sees_a_refusal_as_a_bad_request(
    jp_serverapp: Any, tiny_lm: Path, client_for: Any
) -> None:
    await serve_lm(jp_serverapp, tiny_lm)
    async with client_for() as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(
                model="tinylm", messages=CHAT, max_tokens=2,
                response_format={"type": "json_object"},
            )  # fmt: skip
    assert refused.value.param == "response_format"


async def test_completions_default_to_16_tokens_and_chat_to_the_window(
    jp_serverapp: Any, tiny_lm: Path, client_for: Any
) -> None:
    """OpenAI's legacy completions default `max_tokens` to 16, as if the client asked for
    them (a prompt that leaves fewer is OpenAI's 400); chat runs on, here to the context
    window (512 tokens), which a long conversation leaves some 30 tokens short."""
    await serve_lm(jp_serverapp, tiny_lm)
    chat = [{"role": "user", "content": repeated(tiny_lm, 512 - 30, chat=True)}]
    room = 512 - len(prompt_ids(tiny_lm, messages=chat))
    long_prompt = repeated(tiny_lm, 512 - 10)
    assert room > 16
    assert len(prompt_ids(tiny_lm, long_prompt)) < 512
    async with client_for() as client:
        completion = await client.completions.create(model="tinylm", prompt=PROMPT,
                                                     temperature=0)  # fmt: skip
        chatted = await client.chat.completions.create(model="tinylm", messages=chat,
                                                       temperature=0)  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:
            await client.completions.create(model="tinylm", prompt=long_prompt)
    assert completion.usage is not None
    assert (completion.usage.completion_tokens, completion.choices[0].finish_reason) == \
        (16, "length")  # fmt: skip
    assert completion.choices[0].text == greedy(tiny_lm, 16, prompt=PROMPT)
    assert chatted.usage is not None
    assert (chatted.usage.completion_tokens, chatted.choices[0].finish_reason) == \
        (room, "length")  # fmt: skip
    assert refused.value.code == "context_length_exceeded"
    assert "16 in the completion" in refused.value.message


def repeated(tiny_lm: Path, tokens: int, chat: bool = False) -> str:
    """A text of repeated words, the shortest whose prompt has at least `tokens` tokens."""

    def length(words: int) -> int:
        text = "word " * words
        return len(prompt_ids(tiny_lm, messages=[{"role": "user", "content": text}]) if chat
                   else prompt_ids(tiny_lm, text))  # fmt: skip

    words = next(words for words in range(1, tokens + 1) if length(words) >= tokens)
    return "word " * words
