"""Tests for the fast path (the serve lane's prediction exchange, `server/http/fastpath.py`),
against the full route's answers.

Every other inference test that uses `jp_fetch` (which sends `Authorization: token T`
on a new connection) also runs through the lane; here the two paths are compared
directly, and the rules for when the fast path applies are checked.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.auth.authorizer import AllowAllAuthorizer
from jupyter_server.auth.identity import PasswordIdentityProvider
from route_models import (
    BROWSER_ORIGIN,
    cors_server_config,
    register,
    serve_state,
    server_config,
)
from tornado.httpclient import HTTPResponse

from jupyter_serve.server.http.admission import fast_path_applies
from jupyter_serve.server.http.requests import NO_CACHE_HEADERS

Fetch = Callable[..., Awaitable[HTTPResponse]]
SAME_HEADERS = ("Content-Type", "dummy", *NO_CACHE_HEADERS, "Etag")
RAW = {"Content-Type": "application/octet-stream"}


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path, max_request_size=4096)


async def answer(fetch: Fetch, *path: str, **kwargs: Any) -> HTTPResponse:
    """The response, whether its status is an error or not."""
    response: HTTPResponse = await fetch(*path, raise_error=False, **kwargs)
    return response


async def both_paths(fetch: Fetch, token: str, *path: str, **kwargs: Any) -> list[HTTPResponse]:
    """The same request with a token header (the lane) and with ?token= (full route)."""
    headers = dict(kwargs.pop("headers", {}))
    fast = await answer(fetch, *path, headers=dict(headers), **kwargs)
    params = {**kwargs.pop("params", {}), "token": token}
    full = await answer(
        fetch, *path, headers={**headers, "Authorization": ""}, params=params, **kwargs
    )
    return [fast, full]


def summary(response: HTTPResponse) -> tuple[Any, ...]:
    headers = tuple(response.headers.get(name) for name in SAME_HEADERS)
    return response.code, response.reason, headers, response.body


@pytest.mark.parametrize(
    ("body", "headers", "path"),
    [
        (bytes(range(256)), {"Content-Type": "application/octet-stream"}, ("probe",)),
        ('{"a": 1}', {"Content-Type": "application/json", "X-Mode": "seen"}, ("probe",)),
        ("x", {"X-Mode": "headers"}, ("probe", "1.0")),
        ("x", {"X-Mode": "status"}, ("probe",)),
        ("x", {"X-Mode": "custom"}, ("probe",)),
        ("x", {"X-Mode": "raise"}, ("probe",)),
        ("x", {"X-Mode": "seen"}, ("probe", "1.0", "v1", "chat")),
        ("x", {}, ("nobody",)),
        ("x", {}, ("probe", "9.9")),
        ("x" * 5000, {}, ("probe",)),
    ],
)
async def test_fast_and_full_paths_answer_alike(
    jp_fetch: Fetch, jp_serverapp: Any, body: Any, headers: dict[str, str], path: tuple[str, ...]
) -> None:
    await register(jp_serverapp)
    token = jp_serverapp.identity_provider.token
    fast, full = await both_paths(
        jp_fetch, token, "serve", "predictions", *path, method="POST", body=body, headers=headers
    )
    assert summary(fast) == summary(full)
    assert fast.headers["x-request-id"] != full.headers["x-request-id"]


async def test_every_answer_carries_torchserves_no_cache_headers_and_is_never_a_304(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    token = jp_serverapp.identity_provider.token
    answers = await both_paths(jp_fetch, token, "serve", "predictions", "probe",
                               method="POST", body="x")  # fmt: skip
    answers += await both_paths(jp_fetch, token, "serve", "predictions", "nobody",
                                method="POST", body="x")  # fmt: skip
    for route in ("ping", "models"):  # tornado answered If-None-Match: * with a bare 304
        answers.append(await answer(jp_fetch, "serve", route, headers={"If-None-Match": "*"}))
    codes = [response.code for response in answers]
    assert codes == [200, 200, 404, 404, 200, 200]
    for response in answers:
        assert {name: response.headers.get(name) for name in NO_CACHE_HEADERS} == {
            "Pragma": "no-cache",
            "Cache-Control": "no-cache; no-store, must-revalidate, private",
            "Expires": "Thu, 01 Jan 1970 00:00:00 UTC",
        }
        assert "Etag" not in response.headers


async def test_explanations_set_the_explain_header(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    response = await jp_fetch(
        "serve", "explanations", "probe", method="POST", body="x", headers={"X-Mode": "seen"}
    )
    assert json.loads(response.body)["explain"] == "True"


async def test_a_wrong_token_is_refused_before_the_model(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    for scheme in ("token", "Bearer"):
        refused = await answer(
            jp_fetch, "serve", "predictions", "probe", method="POST", body="x",
            headers={"Authorization": f"{scheme} wrong", "X-Mode": "raise"},
        )  # fmt: skip
        assert refused.code == 403
    registry, _ = serve_state(jp_serverapp)
    metrics = jp_serverapp.web_app.settings["serve_metrics"]
    counted = metrics.render(["ts_inference_requests_total"]).decode()
    assert "probe" not in counted  # no request reached the model (its worker loaded, though)
    assert registry.get("probe").pool.worker_count == 1


async def test_the_fast_path_counts_requests_in_the_metrics(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    for _ in range(3):
        await jp_fetch("serve", "predictions", "probe", method="POST", body="x")
    text = (await jp_fetch("serve", "metrics")).body.decode()
    line = next(row for row in text.splitlines() if row.startswith("ts_inference_requests_total"))
    assert 'model_name="probe"' in line
    assert line.endswith(" 3.0")


async def test_a_client_leaving_mid_request_leaves_the_server_serving(
    jp_fetch: Fetch, jp_serverapp: Any, http_server_port: Any, jp_base_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    await register(jp_serverapp)
    token = jp_serverapp.identity_provider.token
    request = (
        f"POST {jp_base_url}serve/predictions/probe HTTP/1.1\r\nHost: localhost\r\n"
        f"Authorization: token {token}\r\nX-Mode: sleep\r\nContent-Length: 1\r\n\r\nx"
    ).encode()
    with socket.create_connection(("127.0.0.1", http_server_port[-1])) as sock:
        sock.sendall(request)  # the whole request, then the client leaves before the answer
    response = await jp_fetch(
        "serve", "predictions", "probe", method="POST", body="still here", headers=dict(RAW)
    )
    assert response.body == b"still here"
    assert "Fast prediction path failed" not in caplog.text


def test_a_token_compare_is_the_whole_decision_only_for_the_stock_check() -> None:
    class Server:
        def __init__(self, provider: Any, authorizer: Any) -> None:
            self.identity_provider, self.authorizer = provider, authorizer

    class CustomAuthorizer(AllowAllAuthorizer):
        pass

    class HubLikeProvider(PasswordIdentityProvider):
        pass

    stock = PasswordIdentityProvider(token="secret")
    assert fast_path_applies(Server(stock, AllowAllAuthorizer()))
    assert not fast_path_applies(Server(PasswordIdentityProvider(token=""), AllowAllAuthorizer()))
    assert not fast_path_applies(Server(stock, CustomAuthorizer()))
    assert not fast_path_applies(Server(HubLikeProvider(token="secret"), AllowAllAuthorizer()))


class TestSwitchedOff:
    @pytest.fixture
    def jp_server_config(self, tmp_path: Path) -> dict[str, Any]:
        return server_config(tmp_path, fast_predictions=False)

    async def test_no_lane_and_predictions_still_served(
        self, jp_fetch: Fetch, jp_serverapp: Any
    ) -> None:
        assert getattr(jp_serverapp.web_app.settings["serve_app"], "lane", None) is None
        await register(jp_serverapp)
        response = await jp_fetch(
            "serve", "predictions", "probe", method="POST", body="x", headers=dict(RAW)
        )
        assert response.body == b"x"


async def test_an_unexpected_error_is_a_500_on_both_paths_not_a_hang(
    jp_fetch: Fetch, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry, _ = serve_state(jp_serverapp)

    def broken(*args: Any) -> Any:
        raise RuntimeError("a bug in the server")

    monkeypatch.setattr(registry, "get", broken)  # fault injection: the lookup itself fails
    token = jp_serverapp.identity_provider.token
    fast, full = await both_paths(
        jp_fetch, token, "serve", "predictions", "probe", method="POST", body="x", headers=RAW
    )
    assert (fast.code, full.code) == (500, 500)
    assert (
        json.loads(fast.body)
        == json.loads(full.body)
        == {
            "code": 500,
            "type": "InternalServerException",
            "message": "Internal server error",
        }
    )


class TestBrowserOrigins:
    @pytest.fixture
    def jp_server_config(self, tmp_path: Path) -> dict[str, Any]:
        return cors_server_config(tmp_path)

    async def test_a_request_with_an_origin_keeps_the_full_routes_cors(
        self, jp_fetch: Fetch, jp_serverapp: Any
    ) -> None:
        await register(jp_serverapp)
        origin = {"Origin": BROWSER_ORIGIN, **RAW}
        response = await jp_fetch(
            "serve", "predictions", "probe", method="POST", body="x", headers=origin
        )
        assert response.body == b"x"
        assert response.headers["Access-Control-Allow-Origin"] == BROWSER_ORIGIN
