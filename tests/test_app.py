"""The server extension: enabled by default, routes under {base_url}serve/, auth everywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

Fetch = Callable[..., Awaitable[Any]]


async def test_ping_answers_healthy_with_the_token(jp_fetch: Fetch) -> None:
    response = await jp_fetch("serve", "ping")
    assert response.code == 200
    assert json.loads(response.body) == {"status": "Healthy"}


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE"])
async def test_routes_refuse_requests_without_credentials(jp_fetch: Fetch, method: str) -> None:
    body = b"" if method in ("POST", "PUT") else None
    for path in (("serve", "ping"), ("serve", "no-such-route")):
        with pytest.raises(HTTPClientError) as caught:
            await jp_fetch(*path, method=method, body=body, headers={"Authorization": ""})
        assert caught.value.code == 403


async def test_unknown_route_gets_torchserve_error_json(jp_fetch: Fetch) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("serve", "nothing", "here")
    assert caught.value.code == 404
    assert caught.value.response is not None
    assert json.loads(caught.value.response.body) == {
        "code": 404,
        "type": "ResourceNotFoundException",
        "message": "Requested resource is not found, please refer to API document.",
    }


async def test_wrong_verb_gets_method_not_allowed_json(jp_fetch: Fetch) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("serve", "ping", method="DELETE")
    assert caught.value.code == 405
    assert caught.value.response is not None
    assert json.loads(caught.value.response.body)["type"] == "MethodNotAllowedException"


def test_extension_is_enabled_by_the_installed_config() -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "jupyter", "server", "extension", "list"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    output = listing.stdout + listing.stderr
    assert "jupyter_serve" in output
    assert "jupyter_serve 0.1.0" in output
