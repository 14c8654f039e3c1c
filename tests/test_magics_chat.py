"""`%serve chat`: a served language model's answer streamed into the cell, then its figures,
through IPython's shell against a real server and worker."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from lm_models import greedy, tiny_lm
from magic_shell import magic_shell
from route_models import server_config
from test_routes_openai import serve_lm

from jupyter_serve.kernel.chat import chat, events
from jupyter_serve.kernel.client import ServeClient, ServeClientError, ServerInfo

__all__ = ["tiny_lm"]


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


@pytest.fixture
def shell(live_server: ServerInfo) -> Iterator[InteractiveShell]:
    with magic_shell(live_server) as ip:
        yield ip


class Recorder(io.StringIO):
    """The cell's output, and how many writes it took."""

    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


async def test_the_answer_streams_delta_by_delta_then_its_figures(
    jp_serverapp: Any, live_server: ServerInfo, tiny_lm: Path
) -> None:
    await serve_lm(jp_serverapp, tiny_lm)
    out = Recorder()
    answer = await asyncio.to_thread(chat, ServeClient(live_server), "tinylm", "What is a set?",
                                     out=out, max_tokens=8, temperature=0)  # fmt: skip
    expected = greedy(tiny_lm, 8, messages=[{"role": "user", "content": "What is a set?"}])
    assert answer.text == expected
    assert len(answer.deltas) > 1  # token by token, each written as it came
    assert out.getvalue().startswith(expected + "\n[8 tokens (length) · first token ")
    assert out.getvalue().endswith(" tokens/s]\n")
    assert answer.completion_tokens == 8
    assert answer.first_token_s is not None


async def test_the_magic_prints_into_the_cell(
    shell: InteractiveShell, jp_serverapp: Any, tiny_lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await serve_lm(jp_serverapp, tiny_lm)
    line = 'chat tinylm "What is a set?" --max-tokens 5 --temperature 0 --system "Be brief."'
    await asyncio.to_thread(shell.run_line_magic, "serve", line)
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is a set?"}]  # fmt: skip
    printed = capsys.readouterr().out
    assert printed.startswith(greedy(tiny_lm, 5, messages=messages) + "\n[5 tokens (length)")
    await asyncio.to_thread(shell.run_line_magic, "serve", 'chat nothing "hi"')
    failure = "Chat failed: HTTP 404 The model `nothing` does not exist: Model not found: nothing."
    assert capsys.readouterr().out == failure + "\n"


async def test_an_openai_error_reads_as_one_line(live_server: ServerInfo, jp_serverapp: Any,
                                                tiny_lm: Path) -> None:  # fmt: skip
    await serve_lm(jp_serverapp, tiny_lm)
    with pytest.raises(ServeClientError) as refused:
        await asyncio.to_thread(chat, ServeClient(live_server), "tinylm", "x" * 40_000,
                                out=io.StringIO(), max_tokens=4)  # fmt: skip
    assert refused.value.status == 400
    assert "maximum context length" in str(refused.value)


def test_events_end_at_done() -> None:
    lines = [b": comment\n", b'data: {"a": 1}\n', b"\n", b"data: [DONE]\n", b"data: {}\n"]
    assert list(events(iter(lines))) == [{"a": 1}]
