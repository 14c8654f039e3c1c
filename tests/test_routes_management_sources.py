"""`POST serve/models?url=...` as a client sees the url rules of server/registry/sources.py.

By default a client names entries of the model store only: absolute paths and
`file://` urls elsewhere get one 404 whether or not they exist, and a
percent-encoded `..` is a relative path. `ServeApp.allow_local_paths` brings
TorchServe's "any local path" back.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mar_builder import build_handler_mar
from route_models import server_config
from tornado.httpclient import HTTPResponse

Fetch = Callable[..., Awaitable[HTTPResponse]]
ECHO = "def handle(data, context):\n    return data\n"
OUTSIDE = "local paths outside the model store are not allowed; see ServeApp.allow_local_paths"


@pytest.fixture
def serve_traits(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(getattr(request, "param", {}))


@pytest.fixture
def jp_server_config(tmp_path: Path, serve_traits: dict[str, Any]) -> dict[str, Any]:
    return server_config(tmp_path, **serve_traits)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A real archive outside the server's model store."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder / build_handler_mar(folder, "echo", ECHO)


async def register(fetch: Fetch, url: str) -> tuple[int, Any]:
    response = await fetch(
        "serve", "models", method="POST", body=b"", params={"url": url}, raise_error=False
    )
    return response.code, json.loads(response.body)


def not_found(message: str) -> tuple[int, dict[str, Any]]:
    return 404, {"code": 404, "type": "ModelNotFoundException", "message": message}


async def test_paths_outside_the_store_are_refused_alike(jp_fetch: Fetch, outside: Path) -> None:
    missing = outside.with_name("missing.mar")
    for url in (str(outside), str(missing), outside.as_uri(), missing.as_uri()):
        status, body = await register(jp_fetch, url)
        assert (status, body) == (404, {**not_found(f"Model not found at: {url}")[1],
                                        "cause": OUTSIDE})  # fmt: skip
    dotted = "%2e%2e/elsewhere/echo.mar"
    assert await register(jp_fetch, dotted) == not_found(
        f"Relative path is not allowed in url: {dotted}"
    )
    listed = await jp_fetch("serve", "models")
    assert json.loads(listed.body) == {"models": []}


@pytest.mark.parametrize("serve_traits", [{"allow_local_paths": True}], indirect=True)
async def test_allow_local_paths_registers_from_anywhere(jp_fetch: Fetch, outside: Path) -> None:
    status, body = await register(jp_fetch, str(outside))
    assert status == 200
    assert body["status"].startswith('Model "echo" Version: 1.0 registered with 0 initial workers')
    missing = str(outside.with_name("missing.mar"))
    assert await register(jp_fetch, missing) == not_found(f"Model not found at: {missing}")


async def test_urls_torchserve_rejects_early_get_its_answers_not_a_500(jp_fetch: Fetch) -> None:
    """What TorchServe 0.12 answers for a NUL character and for a url that does not parse."""
    nul = "echo.mar\x00/../x"
    status, body = await register(jp_fetch, nul)
    assert (status, body["type"]) == (403, "IllegalArgumentException")
    assert body["message"].startswith("Null character present in file/path name.")
    for url in ("http://[::1", "https://[::1/x.mar"):
        assert await register(jp_fetch, url) == (400, {
            "code": 400, "type": "DownloadArchiveException",
            "message": f"Failed to download archive from: {url}",
        })  # fmt: skip
