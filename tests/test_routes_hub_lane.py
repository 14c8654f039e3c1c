"""Hub tokens on the fast paths: the hub's decision, repeated, in a single-user server.

The Jupyter server here is configured as `jupyterhub-singleuser` configures one:
JupyterHub's own `JupyterHubIdentityProvider` (with its `HubOAuth`) and the README's
`HubScopesAuthorizer`. The hub API it asks (`GET /hub/api/user`) is a small HTTP server
in a thread answering from `USERS` and counting what it was asked, so a test can see
when the server asked the hub; tests/test_hub_e2e.py runs the same requests against a
real JupyterHub. Which side answered a connection is read from tornado's connection set.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hub_users import ACCESS, USERS
from raw_http import connected
from route_models import register, server_config

from jupyter_serve.server.http.admission import HUB_VERDICTS
from jupyter_serve.server.http.base import ServeRoute
from jupyter_serve.server.http.hub_verdicts import HubVerdicts
from jupyter_serve.server.http.lane import Lane

pytest.importorskip("jupyterhub.singleuser.extension")


class HubAPI(BaseHTTPRequestHandler):
    """`GET /hub/api/user`: the model of the token in `Authorization`, else 403."""

    asked: Counter[str]

    def do_GET(self) -> None:
        token = self.headers.get("Authorization", "").removeprefix("token ")
        self.asked[token] += 1
        model = USERS.get(token) if self.path == "/hub/api/user" else None
        body = json.dumps(model or {"status": 403}).encode()
        self.send_response(200 if model else 403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def hub_api() -> Iterator[tuple[str, Counter[str]]]:
    asked: Counter[str] = Counter()
    handler = type("CountingHubAPI", (HubAPI,), {"asked": asked})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hub/api", asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(autouse=True)
def handler_classes_restored() -> Iterator[None]:
    """JupyterHub's identity provider patches its XSRF check into jupyter_server's handler
    classes on first use (for the whole process, as in a single-user server); put the
    classes back as they were for the tests that follow."""
    classes = [cls for cls in ServeRoute.__mro__ if cls.__module__.split(".")[0] != "jupyter_serve"]
    before = {cls: dict(vars(cls)) for cls in classes}
    try:
        yield
    finally:
        for cls, attributes in before.items():
            for name in set(vars(cls)) - set(attributes):
                delattr(cls, name)
            for name, value in attributes.items():
                if vars(cls).get(name) is not value:
                    setattr(cls, name, value)


@pytest.fixture
def jp_server_config(tmp_path: Path, hub_api: tuple[str, Counter[str]]) -> dict[str, Any]:
    config = server_config(tmp_path)
    config["ServerApp"].update(
        identity_provider_class="jupyterhub.singleuser.extension.JupyterHubIdentityProvider",
        authorizer_class="jupyter_serve.hub.HubScopesAuthorizer",
        allow_remote_access=True,  # as jupyterhub-singleuser sets these two
        tornado_settings={"xsrf_cookies": False},  # its identity provider checks XSRF itself
    )
    config["HubOAuth"] = {
        "api_url": hub_api[0],
        "api_token": "server-token",
        "oauth_client_id": "jupyterhub-user-ann",
        "access_scopes": [ACCESS],
    }
    config["HubScopesAuthorizer"] = {"owner": "ann"}
    return config


@pytest.fixture
def asked(hub_api: tuple[str, Counter[str]]) -> Counter[str]:
    return hub_api[1]


async def registered(serverapp: Any) -> str:
    """The path of the probe model's predictions, once it is registered."""
    await register(serverapp)
    return f"{serverapp.base_url}serve/predictions/probe"


@pytest.fixture
def lane(jp_serverapp: Any, http_server: Any) -> Lane:
    """The lane the conftest attached to the test server (it must be there)."""
    found = jp_serverapp.web_app.settings["serve_app"].lane
    assert isinstance(found, Lane)
    return found


def post(path: str, token: str, body: bytes, *extra: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: hub.example", f"Authorization: token {token}",
             f"Content-Length: {len(body)}", *extra]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def answers(port: int, path: str, token: str, count: int, *extra: str) -> list[Any]:
    """`count` predictions on one keep-alive connection: (status, body) each."""
    found = []
    async with connected(port) as raw:
        for n in range(count):
            raw.send(post(path, token, f"body {n}".encode(), *extra))
            status, _, body = await raw.response()
            found.append((status, body if status == 200 else b""))
    return found


async def test_the_owners_hub_token_is_answered_in_the_lane_after_one_question_to_the_hub(
    jp_serverapp: Any, lane: Lane, http_server: Any, jp_http_port: int, asked: Counter[str]
) -> None:
    probe = await registered(jp_serverapp)
    async with connected(jp_http_port) as raw:
        for n in range(3):
            raw.send(post(probe, "ann-token", f"body {n}".encode()))
            status, _, body = await raw.response()
            assert (status, body) == (200, f"body {n}".encode())
        assert len(lane.connections) == 1
        assert not http_server._connections  # tornado never saw the connection
    assert asked["ann-token"] == 1


async def test_a_teammate_is_answered_as_the_hubs_scopes_say(
    jp_serverapp: Any, lane: Lane, http_server: Any, jp_http_port: int
) -> None:
    probe = await registered(jp_serverapp)
    bob = await answers(jp_http_port, probe, "bob-token", 2)
    assert bob == [(200, b"body 0"), (200, b"body 1")]
    assert not http_server._connections
    for refused in ("dan-token", "not-a-hub-token"):  # access alone; unknown to the hub
        assert await answers(jp_http_port, probe, refused, 2) == [(403, b"")] * 2


async def test_a_refusal_is_jupyter_servers_own(
    jp_serverapp: Any, http_server: Any, jp_http_port: int
) -> None:
    probe = await registered(jp_serverapp)
    async with connected(jp_http_port) as raw:
        raw.send(post(probe, "dan-token", b"x"))
        status, _headers, body = await raw.response()
        assert status == 403
        assert len(http_server._connections) == 1  # the full route answered it
    assert json.loads(body)["code"] == 403


@pytest.mark.usefixtures("http_server")
async def test_a_verdict_expires_with_the_hubs_cache_max_age(
    jp_serverapp: Any, jp_http_port: int, asked: Counter[str]
) -> None:
    probe = await registered(jp_serverapp)
    verdicts: HubVerdicts = jp_serverapp.web_app.settings[HUB_VERDICTS]
    now = [0.0]
    verdicts.clock = lambda: now[0]
    assert await answers(jp_http_port, probe, "ann-token", 2) == [
        (200, b"body 0"),
        (200, b"body 1"),
    ]
    now[0] += verdicts.hub_auth.cache_max_age
    assert await answers(jp_http_port, probe, "ann-token", 1) == [(200, b"body 0")]
    assert asked["ann-token"] == 2  # asked again once the verdict was as old as HubAuth's cache


@pytest.mark.parametrize(
    ("query", "extra", "body"),
    [
        ("?token=bob-token", (), b"x"),
        ("", ("Content-Type: application/x-www-form-urlencoded",), b"token=bob-token"),
    ],
    ids=["query", "form"],
)
async def test_a_token_argument_takes_the_full_route(
    jp_serverapp: Any, http_server: Any, jp_http_port: int, query: str, extra: tuple[str, ...],
    body: bytes
) -> None:  # fmt: skip
    probe = await registered(jp_serverapp)
    async with connected(jp_http_port) as raw:
        raw.send(post(probe + query, "ann-token", body, *extra))
        status, _, _ = await raw.response()
        assert status == 200  # JupyterHub reads the header here (no token in URLs)
        assert len(http_server._connections) == 1  # but decided on the full route
