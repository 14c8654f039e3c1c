"""Tests for TorchServe's SageMaker-style and legacy prediction routes, with real workers."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from route_models import register, serve_state, server_config
from tornado.httpclient import HTTPClientError, HTTPResponse

Fetch = Callable[..., Awaitable[HTTPResponse]]
JSON = {"Content-Type": "application/json", "X-Mode": "seen"}


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


def seen(response: HTTPResponse) -> Any:
    assert response.code == 200
    return json.loads(response.body)


async def failure(fetch: Fetch, *path: str, **kwargs: Any) -> tuple[int, Any]:
    with pytest.raises(HTTPClientError) as caught:
        await fetch(*path, **kwargs)
    assert caught.value.response is not None
    return caught.value.code, json.loads(caught.value.response.body)


async def test_invocations_takes_the_model_from_the_query_and_forwards_the_query(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    response = await jp_fetch(
        "serve", "invocations", method="POST", body=json.dumps([1, 2]),
        params={"model_name": "probe", "topk": "3"}, headers=dict(JSON),
    )  # fmt: skip
    info = seen(response)
    assert info["keys"] == ["body", "model_name", "topk"]
    assert info["row"]["body"] == [1, 2]
    assert info["types"]["topk"] in ("bytes", "bytearray")  # no content type: raw, as TS


async def test_invocations_takes_the_model_from_a_form_field(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    response = await jp_fetch(
        "serve", "invocations", method="POST", body="model_name=probe&data=abc",
        headers={"Content-Type": "application/x-www-form-urlencoded", "X-Mode": "seen"},
    )  # fmt: skip
    assert seen(response)["keys"] == ["data", "model_name"]


async def test_invocations_without_a_model_name_is_400(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    code, body = await failure(
        jp_fetch, "serve", "invocations", method="POST", body="{}", headers=dict(JSON)
    )
    assert (code, body) == (
        400,
        {
            "code": 400,
            "type": "BadRequestException",
            "message": "Parameter model_name is required.",
        },
    )


async def test_invocations_defaults_to_the_one_startup_model(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    registry, _ = serve_state(jp_serverapp)
    registry.get("probe").loaded_at_startup = True  # as `load_models` marks it
    response = await jp_fetch("serve", "invocations", method="POST", body="[3]", headers=dict(JSON))
    assert seen(response)["row"] == {"body": [3]}
    await register(jp_serverapp, name="other")
    registry.get("other").loaded_at_startup = True  # two startup models: no default any more
    code, _ = await failure(
        jp_fetch, "serve", "invocations", method="POST", body="[3]", headers=dict(JSON)
    )
    assert code == 400


async def test_invocations_of_an_unknown_model_is_404(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    code, body = await failure(
        jp_fetch, "serve", "invocations", method="POST", body="{}",
        params={"model_name": "nope"}, headers=dict(JSON),
    )  # fmt: skip
    assert (code, body["type"], body["message"]) == (
        404,
        "ModelNotFoundException",
        "Model not found: nope",
    )


async def test_models_invoke_predicts_with_the_default_version(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    response = await jp_fetch(
        "serve", "models", "probe", "invoke", method="POST", body='{"a": 1}',
        params={"q": "1"}, headers=dict(JSON),
    )  # fmt: skip
    info = seen(response)
    assert info["keys"] == ["body", "q"]
    assert info["row"]["body"] == {"a": 1}


async def test_models_path_still_describes_and_scales(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp, workers=0)
    described = json.loads((await jp_fetch("serve", "models", "probe")).body)
    assert described[0]["modelName"] == "probe"


async def test_legacy_predict_routes(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    await register(jp_serverapp, version="2.0")
    unversioned = await jp_fetch(
        "serve", "probe", "predict", method="POST", body="[1]", params={"k": "v"},
        headers=dict(JSON),
    )  # fmt: skip
    assert seen(unversioned)["keys"] == ["body", "k"]
    versioned = await jp_fetch(
        "serve", "probe", "2.0", "predict", method="POST", body="[2]", headers=dict(JSON)
    )
    assert seen(versioned)["row"] == {"body": [2]}
    code, body = await failure(
        jp_fetch, "serve", "probe", "9.9", "predict", method="POST", body="[]", headers=dict(JSON)
    )
    assert (code, body["type"]) == (404, "ModelVersionNotFoundException")


async def test_options_on_an_alias_describes_the_model(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    response = await jp_fetch(
        "serve", "invocations", method="OPTIONS", params={"model_name": "probe"}
    )
    assert "/predictions/probe" in json.loads(response.body)["paths"]
    legacy = await jp_fetch("serve", "probe", "predict", method="OPTIONS")
    assert json.loads(legacy.body) == json.loads(response.body)


async def test_aliases_need_auth(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    for path in (("invocations",), ("models", "probe", "invoke"), ("probe", "predict")):
        with pytest.raises(HTTPClientError) as caught:
            await jp_fetch(
                "serve", *path, method="POST", body="[]", params={"model_name": "probe"},
                headers={"Authorization": "", "Content-Type": "application/json"},
            )  # fmt: skip
        assert caught.value.code == 403, path
