"""Try-it for a language model in a real browser: Debian's chromium driving a real `jupyter lab`.

One `jupyter lab` (lab_browser.py: non-default base_url, cookie + XSRF only) serves the
demo model and a tiny language model (`causal_lm`, registered with one place in its
continuous batch) whose window is long enough that an answer Stop ends is still streaming
whatever this machine's speed. In order: the model's card says its sequences in flight
and tokens per second on one line at the default sidebar width; its Try it is a chat
whose answers stream from `serve/v1/chat/completions` (temperature 0 by default, so the
answer is the one a direct request gets), each with its time to first token and tokens
per second, the conversation going with the next message; Stop ends an answer and the
server frees its place; Copy curl gives a command that, run in a shell with the token in
the environment, streams the answer the chat would get; the demo model's Try it is still
the request form.
Screenshots land in build/screenshots/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from lab_browser import (  # jp_*: pytest-jupyter's loop fixtures, switched off here
    BASE_URL,
    NEEDS_CHROMIUM,
    Lab,
    LabServer,
    browser_page,
    jp_asyncio_loop,  # noqa: F401
    jp_server_cleanup,  # noqa: F401
    playwright_expect,
    running_lab,
)
from lm_models import archive_lm
from serve_process import TOKEN

from jupyter_serve.kernel.tiny_lm import TinyLMShape, make_tiny_lm

expect = playwright_expect()
pytestmark = NEEDS_CHROMIUM
MODEL = "tinylm/1.0"
LONG = 30000  # tokens: the stopped answer's limit, which its greedy answer reaches: far past Stop
ONE_LINE = """node => { const range = document.createRange(); range.selectNodeContents(node);
  return range.getClientRects().length; }"""
STATS = r"^TTFT \d+(\.\d)? ms · \d+(\.\d+)? tokens/s · {tokens} tokens · {why}$"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    root = tmp_path_factory.mktemp("lab")
    (root / "model_store").mkdir()
    lm = make_tiny_lm(root / "tinylm", TinyLMShape(context=LONG + 192))
    archive_lm(lm, root / "model_store")
    with running_lab(root) as lab:
        with lab.serve_client() as client:  # one place: a stopped answer must free it
            query = {"url": "tinylm.mar", "initial_workers": 1, "batch_size": 1,
                     "synchronous": "true"}  # fmt: skip
            client.post("models", params=query).raise_for_status()
        yield lab


@pytest.fixture(scope="module")
def lab(server: LabServer) -> Iterator[Lab]:
    with browser_page() as page:
        lab = Lab(page, server)
        lab.open()
        yield lab


def _direct(server: LabServer, messages: list[dict[str, str]], max_tokens: int) -> str:
    """The answer of a direct, unstreamed request at temperature 0."""
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    with server.serve_client() as client:
        answer = client.post("v1/chat/completions", json=body)
    answer.raise_for_status()
    content: str = answer.json()["choices"][0]["message"]["content"]
    return content


def _summary(server: LabServer) -> dict[str, Any]:
    with server.serve_client() as client:
        models = client.get("summary").json()["models"]
    (row,) = [m for m in models if m["modelName"] == "tinylm"]
    return dict(row)


def _chat(lab: Lab) -> Any:
    lab.open_panel()
    lab.card("tinylm", "1.0").locator(".jp-ServeModel-try").click()
    chat = lab.page.locator(".jp-ServeChat:visible")
    expect(chat).to_be_visible()
    return chat


def _ask(chat: Any, text: str, max_tokens: int) -> Any:
    """Type `text` and send it with Enter; the new answer's bubble."""
    chat.locator('input[name="max_tokens"]').fill(str(max_tokens))
    answers = chat.locator('.jp-ServeChat-message[data-role="assistant"]')
    count = answers.count()
    chat.locator(".jp-ServeChat-input").fill(text)
    chat.locator(".jp-ServeChat-input").press("Enter")
    expect(answers).to_have_count(count + 1)
    return answers.nth(count)


def test_the_card_says_sequences_in_flight_and_tokens_per_second(lab: Lab) -> None:
    panel = lab.open_panel()
    card = lab.card("tinylm", "1.0")
    expect(card).to_have_attribute("data-status", "healthy")
    line = card.locator(".jp-ServeModel-stateful")
    expect(line).to_have_text("0 in flight · 0 tokens/s")
    expect(line).to_have_attribute("title", re.compile(r"^Sequences in flight: "))
    assert line.evaluate(ONE_LINE) == 1, line.inner_text()
    assert panel.evaluate("node => node.scrollWidth <= node.clientWidth")  # no overflow
    expect(lab.card("demo", "1.0").locator(".jp-ServeModel-stateful")).to_be_hidden()


def test_a_chat_streams_the_answer_a_direct_request_gets(lab: Lab, server: LabServer) -> None:
    chat = _chat(lab)
    expect(chat.locator('input[name="temperature"]')).to_have_value("0")
    first = [{"role": "user", "content": "What is a tuple?"}]
    with lab.page.expect_request(re.compile(re.escape(f"{BASE_URL}serve/v1/chat"))) as seen:
        answer = _ask(chat, first[0]["content"], 24)
    request = seen.value
    assert "x-xsrftoken" in request.headers  # ServerConnection: cookie + XSRF
    assert TOKEN not in request.url + json.dumps(request.headers)
    sent = json.loads(request.post_data or "{}")
    assert sent == {"model": MODEL, "messages": first, "temperature": 0, "max_tokens": 24,
                    "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    stats = answer.locator(".jp-ServeChat-stats")
    expect(stats).to_have_text(re.compile(STATS.format(tokens=24, why="length")))
    said = answer.locator(".jp-ServeChat-content").text_content() or ""
    assert said == _direct(server, first, 24)
    assert said

    # The conversation goes with the next message.
    second = [*first, {"role": "assistant", "content": said},
              {"role": "user", "content": "And a list?"}]  # fmt: skip
    with lab.page.expect_request(re.compile(re.escape(f"{BASE_URL}serve/v1/chat"))) as seen:
        answer = _ask(chat, "And a list?", 16)
    assert json.loads(seen.value.post_data or "{}")["messages"] == second
    expect(answer.locator(".jp-ServeChat-stats")).to_have_text(
        re.compile(STATS.format(tokens=16, why="length"))
    )
    assert answer.locator(".jp-ServeChat-content").text_content() == _direct(server, second, 16)
    expect(chat.locator(".jp-ServeChat-send")).to_be_enabled()
    expect(chat.locator(".jp-ServeChat-stop")).to_be_disabled()
    lab.screenshot("chat", lab.page.locator("#jp-main-dock-panel"))

    card_line = lab.card("tinylm", "1.0").locator(".jp-ServeModel-stateful")
    rate = re.compile(r"^0 in flight · (?!0 )\d+(\.\d+)? tokens/s$")
    expect(card_line).to_have_text(rate)  # the 40 tokens, over the last minute
    assert card_line.evaluate(ONE_LINE) == 1, card_line.inner_text()
    lab.screenshot("chat-card", lab.card("tinylm", "1.0"))


def test_stop_ends_the_answer_and_the_server_frees_its_place(lab: Lab, server: LabServer) -> None:
    chat = _chat(lab)
    chat.locator(".jp-ServeChat-clear").click()  # a new conversation
    expect(chat.locator(".jp-ServeChat-message")).to_have_count(0)
    steps = _summary(server)["steps"]
    asked = [{"role": "user", "content": "Tell me about lists."}]
    answer = _ask(chat, asked[0]["content"], LONG)
    content = answer.locator(".jp-ServeChat-content")
    expect(content).not_to_have_text("")  # tokens are coming
    card_line = lab.card("tinylm", "1.0").locator(".jp-ServeModel-stateful")
    expect(card_line).to_have_text(re.compile(r"^1 in flight · "))  # a refresh meanwhile
    chat.locator(".jp-ServeChat-stop").click()
    expect(answer).to_have_attribute("data-ending", "stopped")
    stats = answer.locator(".jp-ServeChat-stats")
    expect(stats).to_have_text(re.compile(STATS.format(tokens=r"(\d+)", why="stopped")))
    came = int(re.findall(r"(\d+) tokens", stats.inner_text())[0])
    expect(chat.locator(".jp-ServeChat-send")).to_be_enabled()
    # The model has one place: this answer is taken once the stopped one left it.
    assert _direct(server, asked, 1)
    after = _summary(server)
    assert after["steps"] - steps < LONG + 1  # the stopped answer did not run to its end
    assert after["inFlight"] == 0
    expect(card_line).to_have_text(re.compile(r"^0 in flight · "))
    partial = content.text_content() or ""
    whole = _direct(server, asked, came + 16)  # what came, then more
    assert partial
    assert whole.startswith(partial)
    assert partial != whole
    assert answer.get_attribute("data-kept") == "true"  # what came stays in the conversation
    lab.screenshot("chat-stopped", lab.page.locator("#jp-main-dock-panel"))


def test_copy_curl_streams_the_answer_the_next_message_gets(lab: Lab, server: LabServer) -> None:
    chat = _chat(lab)
    chat.locator(".jp-ServeChat-clear").click()
    chat.locator('input[name="max_tokens"]').fill("12")
    chat.locator(".jp-ServeChat-input").fill("What is a set?")
    chat.locator(".jp-ServeChat-copy").click()
    lab.notification("Copied the curl command (set JUPYTER_TOKEN first)")
    command = chat.locator(".jp-ServeChat-curl").text_content() or ""
    assert command.startswith("curl -N -X POST")
    assert "$JUPYTER_TOKEN" in command
    assert TOKEN not in command
    assert chat.locator(".jp-ServeChat-input").input_value() == "What is a set?"  # not sent
    expect(chat.locator(".jp-ServeChat-message")).to_have_count(0)

    env = {"PATH": os.environ["PATH"], "JUPYTER_TOKEN": TOKEN}
    ran = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    events = [line[6:] for line in ran.stdout.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    text = "".join(c["delta"].get("content") or "" for e in chunks for c in e["choices"])
    assert text == _direct(server, [{"role": "user", "content": "What is a set?"}], 12)
    assert chunks[-1]["usage"]["completion_tokens"] == 12
    lab.screenshot("chat-curl", lab.page.locator("#jp-main-dock-panel"))


def test_another_model_keeps_the_request_form(lab: Lab) -> None:
    lab.open_panel()
    lab.card("demo", "1.0").locator(".jp-ServeModel-try").click()
    expect(lab.page.locator(".jp-ServeTry:visible")).to_be_visible()
    expect(lab.page.locator(".jp-ServeChat:visible")).to_have_count(0)
    assert lab.console_errors == []
