"""Inference keys over REST: mint, list, revoke, and what a key may and may not open.

Keys are minted through `POST serve/keys` with the Jupyter token, then used as
`Authorization: Bearer KEY` (or `token KEY`) with no token at all: they run the
models in their scope through the full routes and get 403 everywhere else, on
jupyter_serve's other routes and on Jupyter's own (kernels, contents). Requests
without a key keep the server's identity provider and authorizer unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.base.handlers import JupyterHandler
from route_models import register, serve_state, server_config
from tornado import web
from tornado.httpclient import HTTPResponse

Fetch = Callable[..., Awaitable[HTTPResponse]]
OCTETS = {"Content-Type": "application/octet-stream"}  # copy it: jp_fetch adds the token

HEADERS = """
import json


def handle(data, context):
    if not data:
        return None
    return [
        json.dumps(sorted(name.lower() for name in processor.get_request_properties()))
        for processor in context.request_processor
    ]
"""


class DenyServe(Authorizer):
    """Refuses every action on `serve` unless a test opens it (`granted`)."""

    granted: ClassVar[set[str]] = set()

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource != "serve" or action in self.granted


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    DenyServe.granted = {"read", "execute", "write"}
    config = server_config(tmp_path)
    config["ServerApp"]["authorizer_class"] = DenyServe
    return config


async def mint(jp_fetch: Fetch, **fields: Any) -> dict[str, Any]:
    """A new key, minted with the Jupyter token (JSON body)."""
    answer = await jp_fetch("serve", "keys", method="POST", body=json.dumps(fields),
                            headers={"Content-Type": "application/json"})  # fmt: skip
    minted: dict[str, Any] = json.loads(answer.body)
    return minted


def with_key(key: str, scheme: str = "Bearer") -> dict[str, str]:
    return {**OCTETS, "Authorization": f"{scheme} {key}"}


async def status(jp_fetch: Fetch, *path: str, key: str, method: str = "GET", **kw: Any) -> int:
    body = b"x" if method in ("POST", "PUT") else None
    answer = await jp_fetch(*path, method=method, body=body, headers=with_key(key),
                            raise_error=False, **kw)  # fmt: skip
    return int(answer.code)


async def test_mint_list_and_revoke(jp_fetch: Fetch, tmp_path: Path) -> None:
    first = await mint(jp_fetch, name="ci", models=["a", "b"])
    assert set(first) == {"id", "name", "models", "created", "key"}
    assert (first["name"], first["models"]) == ("ci", ["a", "b"])
    assert first["key"].startswith(f"jsk_{first['id']}_")
    by_query = await jp_fetch("serve", "keys", method="POST", body=b"",
                              params={"name": "q", "models": "c, d"})  # fmt: skip
    second = json.loads(by_query.body)
    assert (second["name"], second["models"]) == ("q", ["c", "d"])
    everything = await mint(jp_fetch)
    assert everything["models"] is None

    listed = json.loads((await jp_fetch("serve", "keys")).body)["keys"]
    assert [entry["id"] for entry in listed] == [first["id"], second["id"], everything["id"]]
    assert all(set(entry) == {"id", "name", "models", "created"} for entry in listed)
    stored = (tmp_path / "work" / "keys.json").read_text()
    for secret in (first["key"], second["key"], everything["key"]):
        assert secret not in stored

    revoked = await jp_fetch("serve", "keys", first["id"], method="DELETE")
    assert json.loads(revoked.body) == {"status": f"Key {first['id']} revoked."}
    listed = json.loads((await jp_fetch("serve", "keys")).body)["keys"]
    assert [entry["id"] for entry in listed] == [second["id"], everything["id"]]
    again = await jp_fetch("serve", "keys", first["id"], method="DELETE", raise_error=False)
    assert again.code == 404
    assert json.loads(again.body)["type"] == "ResourceNotFoundException"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"models": 3}, '"models" must be'),
        ({"models": ["a", 1]}, '"models" must be'),
        ({"name": ["x"]}, '"name" must be'),
        ({"name": "x" * 201}, "at most 200"),
    ],
)
async def test_malformed_mints_are_400(jp_fetch: Fetch, body: Any, message: str) -> None:
    answer = await jp_fetch("serve", "keys", method="POST", body=json.dumps(body),
                            headers={"Content-Type": "application/json"},
                            raise_error=False)  # fmt: skip
    assert answer.code == 400
    error = json.loads(answer.body)
    assert error["type"] == "BadRequestException"
    assert message in error["message"]
    assert json.loads((await jp_fetch("serve", "keys")).body) == {"keys": []}


async def test_a_scoped_key_runs_its_model_and_nothing_else(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp, "probe")
    await register(jp_serverapp, "other", workers=0)
    key = (await mint(jp_fetch, name="probe only", models=["probe"]))["key"]

    for scheme in ("Bearer", "token"):  # POSTs without XSRF: the key is a header credential
        answer = await jp_fetch("serve", "predictions", "probe", method="POST", body=b"hi",
                                headers=with_key(key, scheme))  # fmt: skip
        assert (answer.code, answer.body) == (200, b"hi")
        assert "Set-Cookie" not in answer.headers  # a key never becomes a login cookie
    for path, params in [
        (("serve", "explanations", "probe"), {}),
        (("serve", "models", "probe", "invoke"), {}),
        (("serve", "probe", "predict"), {}),
        (("serve", "invocations"), {"model_name": "probe"}),
    ]:
        assert await status(jp_fetch, *path, key=key, method="POST", params=params) == 200, path

    refused = [
        ("POST", ("serve", "predictions", "other"), {}),
        ("POST", ("serve", "explanations", "other"), {}),
        ("POST", ("serve", "v2", "models", "other", "infer"), {}),
        ("POST", ("serve", "other", "predict"), {}),
        ("POST", ("serve", "invocations"), {"model_name": "other"}),
        ("POST", ("serve", "invocations"), {}),  # a scoped key needs the model's name
        ("OPTIONS", ("serve", "predictions", "probe"), {}),  # read, not execute
        ("GET", ("serve", "models"), {}),
        ("POST", ("serve", "models"), {"url": "probe-1.0.mar", "model_name": "again"}),
        ("PUT", ("serve", "models", "probe"), {"min_worker": "0"}),
        ("GET", ("serve", "metrics"), {}),
        ("GET", ("serve", "ping"), {}),
        ("GET", ("serve", "keys"), {}),
        ("POST", ("serve", "keys"), {}),
        ("GET", ("api", "kernels"), {}),
        ("POST", ("api", "kernels"), {}),
        ("GET", ("api", "contents"), {}),
        ("GET", ("api", "sessions"), {}),
        ("GET", ("api", "terminals"), {}),
        ("POST", ("api", "terminals"), {}),
    ]
    for method, path, params in refused:
        assert await status(jp_fetch, *path, key=key, method=method, params=params) == 403, path
    registry, _ = serve_state(jp_serverapp)
    assert [m["modelName"] for m in registry.list_models()["models"]] == ["other", "probe"]
    assert registry.get("probe").pool.worker_count == 1


async def test_an_unscoped_key_runs_every_model(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp, "probe")
    key = (await mint(jp_fetch))["key"]
    assert await status(jp_fetch, "serve", "predictions", "probe", key=key, method="POST") == 200
    assert await status(jp_fetch, "serve", "invocations", key=key, method="POST",
                        params={"model_name": "probe"}) == 200  # fmt: skip
    assert await status(jp_fetch, "serve", "predictions", "nobody", key=key) == 404
    assert await status(jp_fetch, "serve", "models", key=key) == 403
    assert await status(jp_fetch, "api", "kernels", key=key) == 403


async def test_revoked_wrong_and_query_keys_are_refused(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp, "probe")
    minted = await mint(jp_fetch)
    key = minted["key"]
    assert await status(jp_fetch, "serve", "predictions", "probe", key=key, method="POST") == 200
    forged = key[:-2] + ("zz" if not key.endswith("zz") else "yy")
    assert await status(jp_fetch, "serve", "predictions", "probe", key=forged) == 403
    in_query = await jp_fetch("serve", "predictions", "probe", params={"token": key},
                              headers={"Authorization": ""}, raise_error=False)  # fmt: skip
    assert in_query.code == 403  # keys are read from the Authorization header only
    await jp_fetch("serve", "keys", minted["id"], method="DELETE")
    assert await status(jp_fetch, "serve", "predictions", "probe", key=key, method="POST") == 403


async def test_handlers_never_see_jupyters_credentials(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp, "headers", source=HEADERS)
    key = (await mint(jp_fetch))["key"]
    extra = {"X-Trace": "t1", "Cookie": "_xsrf=abc; other=1", "X-XSRFToken": "abc",
             "x-xsrftoken": "abc", "X-CSRFToken": "abc", **OCTETS}  # fmt: skip
    token = await jp_fetch("serve", "predictions", "headers", method="POST", body=b"x",
                           headers={**extra})  # fmt: skip
    keyed = await jp_fetch("serve", "predictions", "headers", method="POST", body=b"x",
                           headers={**extra, "Authorization": f"Bearer {key}"})  # fmt: skip
    for answer in (token, keyed):
        seen = json.loads(answer.body)
        assert "x-trace" in seen
        assert not {"authorization", "cookie", "x-xsrftoken", "x-csrftoken"} & set(seen), seen


async def test_nothing_is_weakened_for_requests_without_a_key(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp, "probe")
    key = (await mint(jp_fetch))["key"]
    DenyServe.granted = set()
    denied = await jp_fetch("serve", "predictions", "probe", method="POST", body=b"x",
                            headers={**OCTETS}, raise_error=False)  # fmt: skip
    assert denied.code == 403  # the token user still asks the server's authorizer
    assert (await jp_fetch("serve", "models", raise_error=False)).code == 403
    # a key is decided by its own scope, not by the server's authorizer
    assert await status(jp_fetch, "serve", "predictions", "probe", key=key, method="POST") == 200

    DenyServe.granted = {"read", "execute"}
    ping = await jp_fetch("serve", "ping")  # a login cookie, as a browser would hold it
    cookies = [value.split(";", 1)[0] for value in ping.headers.get_list("Set-Cookie")]
    (cookie,) = [value for value in cookies if not value.startswith("_xsrf=")]
    for authorization in ("", "Bearer jsk_0123456789ab_wrong"):
        # cookie-authenticated POSTs still need XSRF, a wrong key in the header or not
        answer = await jp_fetch("serve", "predictions", "probe", method="POST", body=b"x",
                                headers={**OCTETS, "Cookie": cookie,
                                         "Authorization": authorization},
                                raise_error=False)  # fmt: skip
        assert answer.code == 403, authorization
        assert b"_xsrf" in answer.body
    cookie_get = await jp_fetch("serve", "models", headers={"Cookie": cookie, "Authorization": ""})
    assert cookie_get.code == 200  # the cookie itself still works where XSRF is not needed


def refuse_without_xsrf(handler: Any) -> None:
    """An XSRF check that knows nothing of keys or of jupyter_server's token: what JupyterHub's
    single-user server installs on jupyter_server's handler classes (it exempts only hub
    tokens, which this server has none of)."""
    if handler.request.method not in ("GET", "HEAD", "OPTIONS"):
        raise web.HTTPError(403, f"'_xsrf' argument missing from {handler.request.method}")


async def test_a_key_needs_no_xsrf_when_an_extension_replaces_the_check(
    jp_fetch: Fetch, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await register(jp_serverapp, "probe")
    key = (await mint(jp_fetch))["key"]
    monkeypatch.setattr(JupyterHandler, "check_xsrf_cookie", refuse_without_xsrf)
    # as JupyterHub's single-user server: only the check in jupyter_server's `prepare` runs,
    # none before it (tornado's, which would come before any user is known)
    monkeypatch.setitem(jp_serverapp.web_app.settings, "xsrf_cookies", False)
    assert await status(jp_fetch, "serve", "predictions", "probe", key=key, method="POST") == 200
    assert await status(jp_fetch, "serve", "keys", key=key, method="POST") == 403  # execute only
    wrong = "jsk_0123456789ab_wrong"  # just a wrong token: the replaced check refuses it
    answer = await jp_fetch("serve", "predictions", "probe", method="POST", body=b"x",
                            headers=with_key(wrong), raise_error=False)  # fmt: skip
    assert (answer.code, b"_xsrf" in answer.body) == (403, True)
    token = await jp_fetch("serve", "predictions", "probe", method="POST", body=b"x",
                           headers={**OCTETS}, raise_error=False)  # fmt: skip
    assert token.code == 403  # every other request still gets the server's (replaced) check
