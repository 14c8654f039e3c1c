"""The authorizer decides every verb of every route, with resource `serve` and its action.

The route crawl of `test_routes_auth.py` runs again under a `PolicyAuthorizer`
that records what it is asked and allows only the actions a test grants: with
nothing granted, every verb of every route answers 403 with TorchServe's error
body, and the action asked is the one the README documents for that verb. Then a
policy is tried as an admin would write it: "may predict, may not register".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.utils import url_path_join
from route_models import register, serve_state, server_config
from test_routes_auth import CASES, routed_path
from tornado.httpclient import HTTPResponse

from jupyter_serve.server.http import ROUTES
from jupyter_serve.server.http.access import allow
from jupyter_serve.server.http.openai import ROUTES as OPENAI_ROUTES


class PolicyAuthorizer(Authorizer):
    """Allows the actions in `granted` on `serve` (everything else) and records each ask."""

    granted: ClassVar[set[str]] = set()
    asked: ClassVar[list[tuple[str, str]]] = []

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        self.asked.append((action, resource))
        return resource != "serve" or action in self.granted


@pytest.fixture
def policy() -> Any:
    PolicyAuthorizer.granted = set()
    PolicyAuthorizer.asked = []
    return PolicyAuthorizer


@pytest.fixture
def jp_server_config(tmp_path: Path, policy: Any) -> dict[str, Any]:
    config = server_config(tmp_path)
    config["ServerApp"]["authorizer_class"] = policy
    return config


EXECUTE_ROUTES = {
    "PredictionRoute",
    "ExplanationRoute",
    "AliasPredictionRoute",
    "InvocationsRoute",
    "V1InferRoute",
    "V2InferRoute",
    "OpenAIModelsRoute",
    "CompletionsRoute",
    "ChatCompletionsRoute",
}
WRITES = {("ModelsRoute", "POST"), ("ModelRoute", "PUT"), ("ModelRoute", "DELETE"),
          ("SetDefaultRoute", "PUT"),
          ("KeysRoute", "GET"), ("KeysRoute", "POST"), ("KeyRoute", "DELETE"),
          ("ModelStoreRoute", "PUT"), ("ModelArchiveRoute", "GET")}  # fmt: skip


def expected_action(route: type[Any], verb: str) -> str:
    """The README's table: run a model is execute, change what is served (or the inference
    keys) is write."""
    if (route.__name__, verb) in WRITES:
        return "write"
    if route.__name__ in EXECUTE_ROUTES and verb != "OPTIONS":
        return "execute"
    return "read"


ROUTE_OF = dict(ROUTES)
OPENAI_PATTERNS = {pattern for pattern, _ in OPENAI_ROUTES}


async def send(client: Any, base_url: str, token: str, verb: str, path: str) -> HTTPResponse:
    url = url_path_join(base_url, "serve", path)
    body = b"" if verb in ("POST", "PUT", "PATCH") else None
    response: HTTPResponse = await client.fetch(
        url, method=verb, body=body, headers={"Authorization": f"token {token}"}, raise_error=False
    )
    return response


@pytest.mark.parametrize(("pattern", "verb"), CASES)
async def test_a_denying_authorizer_refuses_every_verb_of_every_route_with_its_action(
    http_server_client: Any, jp_serverapp: Any, jp_base_url: str, policy: Any, pattern: str,
    verb: str,
) -> None:  # fmt: skip
    token = jp_serverapp.identity_provider.token
    response = await send(http_server_client, jp_base_url, token, verb, routed_path(pattern))
    assert response.code == 403
    if verb != "HEAD":
        body = json.loads(response.body)
        if pattern in OPENAI_PATTERNS:  # OpenAI's error object, not TorchServe's
            body = body["error"]
            assert body["type"] == "permission_error"
        else:
            assert body["code"] == 403
        assert body["message"].startswith("User is not authorized to")
    assert policy.asked == [(expected_action(ROUTE_OF[pattern], verb), "serve")]


async def test_denied_requests_change_nothing_and_run_no_handler(
    jp_fetch: Any, jp_serverapp: Any, policy: Any
) -> None:
    policy.granted = {"read", "execute", "write"}
    await register(jp_serverapp, "probe")
    registry, _ = serve_state(jp_serverapp)
    counted = {"name[]": "ts_inference_requests_total"}  # host gauges move on their own
    before = (await jp_fetch("serve", "metrics", params=counted)).body
    policy.granted = {"read"}
    denied = [
        ("POST", ("models",), {"url": "probe-1.0.mar", "model_name": "other"}),
        ("PUT", ("models", "probe"), {"min_worker": "3"}),
        ("DELETE", ("models", "probe"), {}),
        ("PUT", ("models", "probe", "1.0", "set-default"), {}),
        ("POST", ("predictions", "probe"), {}),
        ("POST", ("v2", "models", "probe", "infer"), {}),
    ]
    for verb, path, params in denied:
        body = b"{}" if verb != "DELETE" else None
        response = await jp_fetch("serve", *path, method=verb, params=params, body=body,
                                  raise_error=False)  # fmt: skip
        assert response.code == 403, (verb, path)
    assert [entry["modelName"] for entry in registry.list_models()["models"]] == ["probe"]
    assert registry.get("probe").pool.worker_count == 1
    after = (await jp_fetch("serve", "metrics", params=counted)).body
    assert after == before  # no request reached a model


async def test_a_policy_that_may_predict_but_not_register(
    jp_fetch: Any, jp_serverapp: Any, policy: Any
) -> None:
    policy.granted = {"write"}
    await register(jp_serverapp, "probe")
    policy.granted = {"read", "execute"}
    answer = await jp_fetch(
        "serve", "predictions", "probe", method="POST", body=b"hi",
        headers={"Content-Type": "application/octet-stream"},
    )  # fmt: skip
    assert answer.body == b"hi"
    assert (await jp_fetch("serve", "models")).code == 200
    refused = await jp_fetch(
        "serve", "models", method="POST", params={"url": "probe-1.0.mar", "model_name": "again"},
        body=b"", raise_error=False,
    )  # fmt: skip
    assert refused.code == 403
    assert json.loads(refused.body)["message"] == (
        "User is not authorized to write on resource: serve."
    )


def test_allow_knows_only_the_three_actions() -> None:
    with pytest.raises(ValueError, match="unknown action"):
        allow("admin")
