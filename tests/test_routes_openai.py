"""The OpenAI routes with the official `openai` client (and curl): a tiny LM archived as
torch-model-archiver packs one, registered by its .mar, answering chat and completions,
streamed and not, exactly as `generate()` does at temperature 0."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest
from lm_models import archive_lm, greedy, prompt_ids, tiny_lm
from raw_http import connected
from route_models import register, serve_state, server_config

from jupyter_serve.server.models import RegisterParams

__all__ = ["tiny_lm"]

CHAT = [{"role": "user", "content": "What is a tuple?"}]
PROMPT = "Lists are"
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


async def serve_lm(serverapp: Any, folder: Path, **params: Any) -> None:
    registry, store = serve_state(serverapp)
    archive_lm(folder, store)
    values = {"initial_workers": 1, "response_timeout": 60, "startup_timeout": 60, **params}
    await registry.register("tinylm.mar", RegisterParams(**values))


@pytest.fixture
def client_for(jp_serverapp: Any, jp_http_port: int, jp_base_url: str, http_server: Any) -> Any:
    def make(api_key: str | None = None) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"http://localhost:{jp_http_port}{jp_base_url}serve/v1",
            api_key=api_key or jp_serverapp.identity_provider.token, max_retries=0,
        )  # fmt: skip

    return make


async def test_models_lists_the_language_models(
    jp_serverapp: Any, tiny_lm: Path, client_for: Any
) -> None:
    await serve_lm(jp_serverapp, tiny_lm)
    await register(jp_serverapp, "probe")  # not a language model: not listed
    async with client_for() as client:
        listed = await client.models.list()
        retrieved = [await client.models.retrieve(model.id) for model in listed.data]
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("nothing")
    assert [model.id for model in listed.data] == ["tinylm", "tinylm/1.0"]
    assert {model.owned_by for model in listed.data} == {"jupyter_serve"}
    assert [model.model_dump(exclude={"name", "ready"}) for model in retrieved] == \
        [model.model_dump() for model in listed.data]  # fmt: skip


async def test_retrieving_a_model_keeps_kserve_v1_readiness(
    jp_fetch: Any, jp_serverapp: Any, tiny_lm: Path, client_for: Any
) -> None:
    """`GET v1/models/{m}` is KServe v1's readiness: a language model's answer adds
    OpenAI's fields; another model's is KServe's alone, and no "name/version" id (the
    client sends `name%2Fversion`) finds it."""
    await serve_lm(jp_serverapp, tiny_lm)
    await register(jp_serverapp, "probe")
    answers = [await jp_fetch("serve", "v1", "models", name) for name in ("tinylm", "probe")]
    tinylm, probe = (json.loads(answer.body) for answer in answers)
    assert tinylm == {"name": "tinylm", "ready": True, "id": "tinylm", "object": "model",
                      "created": tinylm["created"], "owned_by": "jupyter_serve"}  # fmt: skip
    assert probe == {"name": "probe", "ready": True}
    async with client_for() as client:
        for unknown in ("probe/1.0", "tinylm/9.9", "tinylm/", "nothing"):
            with pytest.raises(openai.NotFoundError):
                await client.models.retrieve(unknown)


async def test_chat_at_temperature_0_answers_what_generate_answers(
    jp_serverapp: Any, tiny_lm: Path, client_for: Any
) -> None:
    await serve_lm(jp_serverapp, tiny_lm)
    async with client_for() as client:
        answer = await client.chat.completions.create(
            model="tinylm", messages=CHAT, max_tokens=12, temperature=0
        )
    choice = answer.choices[0]
    assert choice.message.content == greedy(tiny_lm, 12, messages=CHAT)
    assert (choice.message.role, choice.finish_reason, answer.model) == \
        ("assistant", "length", "tinylm")  # fmt: skip
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == len(prompt_ids(tiny_lm, messages=CHAT))
    assert (answer.usage.completion_tokens, answer.object) == (12, "chat.completion")


async def test_a_streamed_completion_sends_each_token_then_usage(
    jp_serverapp: Any, tiny_lm: Path, client_for: Any
) -> None:
    await serve_lm(jp_serverapp, tiny_lm)
    async with client_for() as client:
        stream = await client.completions.create(
            model="tinylm/1.0", prompt=PROMPT, max_tokens=10, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = [chunk async for chunk in stream]
    texts = [chunk.choices[0].text for chunk in chunks if chunk.choices]
    assert "".join(texts) == greedy(tiny_lm, 10, prompt=PROMPT)
    assert len(texts) >= 5  # token by token, not one block
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 10


async def test_a_streamed_chat_names_the_role_first(
    jp_serverapp: Any, tiny_lm: Path, client_for: Any
) -> None:
    await serve_lm(jp_serverapp, tiny_lm)
    async with client_for() as client:
        stream = await client.chat.completions.create(
            model="tinylm", messages=CHAT, max_tokens=6, temperature=0, stream=True
        )
        chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    last = chunks[-1].choices[0]
    assert (last.finish_reason, last.delta.content, last.delta.role) == ("length", None, None)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == greedy(tiny_lm, 6, messages=CHAT)
    assert all(chunk.usage is None for chunk in chunks)


async def test_stop_sequences_and_seeds(jp_serverapp: Any, tiny_lm: Path, client_for: Any) -> None:
    await serve_lm(jp_serverapp, tiny_lm)
    async with client_for() as client:
        await stop_then_seeds(client, tiny_lm)


async def stop_then_seeds(client: openai.AsyncOpenAI, tiny_lm: Path) -> None:
    full = greedy(tiny_lm, 16, prompt=PROMPT)
    stop = full[6:9]
    stopped = await client.completions.create(model="tinylm", prompt=PROMPT, max_tokens=16,
                                              temperature=0, stop=[stop])  # fmt: skip
    assert stopped.choices[0].text == full[: full.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"

    async def sample(seed: int) -> str:
        answer = await client.completions.create(
            model="tinylm", prompt=PROMPT, max_tokens=12, temperature=1.0, top_p=0.95, seed=seed
        )
        return answer.choices[0].text

    first, again, other = await asyncio.gather(sample(5), sample(5), sample(6))
    assert first == again
    assert first != other


async def test_an_inference_key_is_an_api_key_within_its_scope(
    jp_fetch: Any, jp_serverapp: Any, tiny_lm: Path, client_for: Any
) -> None:
    await serve_lm(jp_serverapp, tiny_lm)

    async def mint(models: list[str]) -> str:
        answer = await jp_fetch("serve", "keys", method="POST", headers=dict(JSON),
                                body=json.dumps({"name": "app", "models": models}))  # fmt: skip
        return str(json.loads(answer.body)["key"])

    async with client_for(await mint(["tinylm"])) as keyed:
        answer = await keyed.completions.create(model="tinylm", prompt=PROMPT, max_tokens=2,
                                                temperature=0)  # fmt: skip
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 2
    async with client_for(await mint(["other"])) as other:
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await other.completions.create(model="tinylm", prompt=PROMPT, max_tokens=2)
    assert refused.value.type == "permission_error"
    async with client_for("not-a-key") as stranger:
        with pytest.raises(openai.PermissionDeniedError):
            await stranger.models.list()


async def test_a_prompt_past_the_context_window_is_a_400(
    jp_serverapp: Any, tiny_lm: Path, client_for: Any
) -> None:
    await serve_lm(jp_serverapp, tiny_lm)
    async with client_for() as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.completions.create(model="tinylm", prompt="word " * 600, max_tokens=4)
    assert (refused.value.code, refused.value.param) == ("context_length_exceeded", "prompt")
    assert "maximum context length is 512 tokens" in refused.value.message


async def test_an_empty_prompt_is_a_400_not_a_server_error(
    jp_fetch: Any, jp_serverapp: Any, tiny_lm: Path, client_for: Any
) -> None:
    """No token to continue from: the worker refuses it (it alone knows the token count),
    as OpenAI's 400 on its routes and TorchServe's error JSON on predictions."""
    await serve_lm(jp_serverapp, tiny_lm)
    async with client_for() as client:
        for prompt, stream in (("", False), ([""], False), ("", True)):
            with pytest.raises(openai.BadRequestError) as refused:
                await client.completions.create(model="tinylm", prompt=prompt, max_tokens=4,
                                                stream=stream)  # fmt: skip
            assert refused.value.body == {
                "message": "The prompt is empty: the model needs at least one token to continue.",
                "type": "invalid_request_error", "param": "prompt", "code": None,
            }  # fmt: skip
    answer = await jp_fetch("serve", "predictions", "tinylm", method="POST", raise_error=False,
                            body=json.dumps({"prompt": ""}), headers=dict(JSON))  # fmt: skip
    assert answer.code == 400
    assert json.loads(answer.body)["type"] == "InvalidRequest"


BAD = [
    ({"model": "tinylm", "prompt": "a", "n": 2}, 400, "n"),
    ({"model": "tinylm", "messages": [{"role": "wizard", "content": "a"}]}, 400,
     "messages[0].role"),
    ({"model": "tinylm", "messages": "hello"}, 400, "messages"),
    ({"model": "tinylm", "messages": [{"role": "user"}]}, 400, "messages[0].content"),
    ({"model": "tinylm", "prompt": "a", "max_tokens": 0}, 400, "max_tokens"),
    ({"model": "tinylm", "prompt": "a", "max_tokens": 600}, 400, "prompt"),
    ({"model": "tinylm", "prompt": "a", "stop": ["x"] * 10_000}, 400, "stop"),
    ({"model": "tinylm", "prompt": "a", "logprobs": 2}, 400, "logprobs"),
    ({"model": "nothing", "prompt": "a"}, 404, None),
    ({"model": "probe", "prompt": "a"}, 400, "model"),
    ({"prompt": "a"}, 400, "model"),
    ({"model": "tinylm", "prompt": "x" * 1_000_000}, 400, "prompt"),
    ({"model": "tinylm", "messages": [{"role": "user", "content": "x " * 500_000}]}, 400,
     "messages"),
    ({"model": "tinylm", "prompt": "x" * 1_100_000}, 413, None),
]  # fmt: skip


@pytest.mark.parametrize(("body", "status", "param"), BAD)
async def test_bad_requests_are_openai_errors(
    jp_fetch: Any, jp_serverapp: Any, tiny_lm: Path, body: dict[str, Any], status: int,
    param: str | None,
) -> None:  # fmt: skip
    await serve_lm(jp_serverapp, tiny_lm)
    await register(jp_serverapp, "probe")
    route = "chat/completions" if "messages" in body else "completions"
    answer = await jp_fetch("serve", "v1", *route.split("/"), method="POST", raise_error=False,
                            body=json.dumps(body), headers=dict(JSON))  # fmt: skip
    assert answer.code == status, answer.body
    error = json.loads(answer.body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    if status == 404:
        assert error["code"] == "model_not_found"
    one_token = json.dumps({"model": "tinylm", "prompt": "a", "max_tokens": 1, "temperature": 0})
    still = await jp_fetch("serve", "v1", "completions", method="POST", headers=dict(JSON),
                           body=one_token)  # fmt: skip
    assert json.loads(still.body)["usage"]["completion_tokens"] == 1  # nothing stuck


async def test_malformed_json_is_a_400(jp_fetch: Any, jp_serverapp: Any) -> None:
    for raw in (b"{", b"[" * 50_000, b"\xff"):
        answer = await jp_fetch("serve", "v1", "completions", method="POST", body=raw,
                                headers=dict(JSON), raise_error=False)  # fmt: skip
        assert answer.code == 400
        assert json.loads(answer.body)["error"]["type"] == "invalid_request_error"


async def test_a_client_that_leaves_mid_stream_frees_its_place_at_once(
    jp_fetch: Any, jp_serverapp: Any, jp_http_port: int, tiny_lm: Path
) -> None:
    """One place in the batch: a stream asking 400 tokens is left after its first event;
    the next request is answered, and the model ran far fewer than 400 steps in all."""
    await serve_lm(jp_serverapp, tiny_lm, batch_size=1)
    token = jp_serverapp.identity_provider.token
    body = json.dumps({"model": "tinylm", "prompt": PROMPT, "max_tokens": 400,
                       "stream": True}).encode()  # fmt: skip
    async with connected(jp_http_port) as raw:
        raw.send((f"POST {jp_serverapp.base_url}serve/v1/completions HTTP/1.1\r\n"
                  f"Host: localhost\r\nAuthorization: Bearer {token}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                  ).encode() + body)  # fmt: skip
        head = await raw.reader.readuntil(b"\r\n\r\n")
        assert b"text/event-stream" in head
        await raw.reader.readuntil(b"\n\n")  # the first event
    answer = await jp_fetch("serve", "v1", "completions", method="POST", headers=dict(JSON),
                            body=json.dumps({"model": "tinylm", "prompt": PROMPT,
                                             "max_tokens": 3, "temperature": 0}))  # fmt: skip
    assert json.loads(answer.body)["usage"]["completion_tokens"] == 3
    summary = json.loads((await jp_fetch("serve", "summary")).body)
    [row] = [m for m in summary["models"] if m["modelName"] == "tinylm"]
    assert row["steps"] < 100


async def test_curl_streams_events_as_they_come(
    jp_serverapp: Any, jp_http_port: int, jp_base_url: str, tiny_lm: Path, http_server: Any
) -> None:
    await serve_lm(jp_serverapp, tiny_lm)
    body = json.dumps({"model": "tinylm", "messages": CHAT, "max_tokens": 5, "stream": True,
                       "temperature": 0})  # fmt: skip
    curl = await asyncio.create_subprocess_exec(
        "curl", "-sN", f"http://localhost:{jp_http_port}{jp_base_url}serve/v1/chat/completions",
        "-H", f"Authorization: Bearer {jp_serverapp.identity_provider.token}",
        "-H", "Content-Type: application/json", "-d", body,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await curl.communicate()
    events = [line[len("data: ") :] for line in out.decode().split("\n\n") if line]
    assert events[-1] == "[DONE]"
    parsed = [json.loads(event) for event in events[:-1]]
    text = "".join(p["choices"][0]["delta"].get("content", "") for p in parsed)
    assert text == greedy(tiny_lm, 5, messages=CHAT)
    assert parsed[-1]["choices"][0]["finish_reason"] == "length"
    assert parsed[-1]["choices"][0]["delta"] == {}  # as OpenAI's last chunk: no content


async def test_torchserve_clients_stream_text_from_predictions(
    jp_fetch: Any, jp_serverapp: Any, tiny_lm: Path
) -> None:
    """The same model on TorchServe's route: a JSON body in, the text streamed in chunks."""
    await serve_lm(jp_serverapp, tiny_lm)
    body = json.dumps({"prompt": PROMPT, "max_new_tokens": 9})
    answer = await jp_fetch("serve", "predictions", "tinylm", method="POST", body=body,
                            headers=dict(JSON))  # fmt: skip
    assert answer.body.decode() == greedy(tiny_lm, 9, prompt=PROMPT)
    assert answer.headers["Transfer-Encoding"] == "chunked"
    assert answer.headers["Content-Type"] == "text/plain; charset=utf-8"
    plain = await jp_fetch("serve", "predictions", "tinylm", method="POST", body=PROMPT,
                           headers={"Content-Type": "text/plain"})  # fmt: skip
    assert plain.body.decode().startswith(greedy(tiny_lm, 9, prompt=PROMPT))  # up to the window
