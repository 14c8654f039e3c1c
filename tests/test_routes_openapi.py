"""Tests for the OpenAPI description: served, and covering every route of the table."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from route_models import register, server_config
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_serve.routes import ROUTES
from jupyter_serve.routes.openapi import api_description

Fetch = Callable[..., Awaitable[HTTPResponse]]


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


def _concrete(path: str) -> str:
    """An OpenAPI path with sample values in its parameters, relative to the prefix."""
    return re.sub(r"\{[^}]+\}", "x1", path).lstrip("/")


@pytest.mark.parametrize(("pattern", "route"), [r for r in ROUTES if r[0] != r".*"])
def test_every_route_has_a_documented_path(pattern: str, route: Any) -> None:
    paths = [_concrete(path) for path in api_description()["paths"]]
    assert any(re.fullmatch(pattern, path) for path in paths), (pattern, route.__name__)


def test_documented_paths_are_all_routed_to_a_real_route() -> None:
    for path in api_description()["paths"]:
        concrete = _concrete(path)
        route = next(route for pattern, route in ROUTES if re.fullmatch(pattern, concrete))
        assert route.__name__ != "NotFoundRoute", path


def test_torchserve_operation_ids() -> None:
    paths = api_description()["paths"]
    assert paths["/ping"]["get"]["operationId"] == "ping"
    assert paths["/predictions/{model_name}"]["post"]["operationId"] == "predictions"
    assert paths["/models"]["post"]["operationId"] == "registerModel"
    register = {p["name"] for p in paths["/models"]["post"]["parameters"]}
    assert {"url", "model_name", "initial_workers", "synchronous"} <= register


async def test_api_description_and_options_on_the_root(jp_fetch: Fetch) -> None:
    described = json.loads((await jp_fetch("serve", "api-description")).body)
    assert described["openapi"] == "3.0.1"
    assert "/ping" in described["paths"]
    root = await jp_fetch("serve", "", method="OPTIONS")
    assert json.loads(root.body) == described
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("serve", "")
    assert caught.value.code == 405  # GET / is 405 in TorchServe
    with pytest.raises(HTTPClientError) as anonymous:
        await jp_fetch("serve", "api-description", headers={"Authorization": ""})
    assert anonymous.value.code == 403


async def test_options_on_a_model_gives_its_management_api(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp, workers=0)
    document = json.loads((await jp_fetch("serve", "models", "probe", method="OPTIONS")).body)
    assert document["info"]["title"] == "Management RESTful API for: probe"
    assert set(document["paths"]["/models/probe"]) == {"get", "put", "delete", "options"}
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch("serve", "models", "nobody", method="OPTIONS")
    assert missing.value.code == 404
    with pytest.raises(HTTPClientError) as anonymous:
        await jp_fetch("serve", "models", "probe", method="OPTIONS", headers={"Authorization": ""})
    assert anonymous.value.code == 403
