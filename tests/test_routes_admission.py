"""The fast paths take a request only when jupyter_server would; else its full route answers.

A token prediction with a remote `Host`, an `Origin` (even an empty one) or a wrong
token gets, through the serve lane, exactly the
full route's answer (`?token=`, which no fast path takes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from route_models import register, server_config
from tornado.httpclient import HTTPResponse

from jupyter_serve.server.http.admission import (
    admits,
    host_is_local,
    token_argument,
    token_matches,
)
from jupyter_serve.server.http.fastpath import FastPredictions


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


LOCAL = {"local_hostnames": ["localhost", "notebook.internal"]}


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("localhost", True),
        ("localhost:8888", True),
        ("127.0.0.1:1", True),
        ("127.9.9.9", True),
        ("[::1]:8888", True),
        ("notebook.internal:80", True),
        ("evil.example", False),
        ("evil.example:8888", False),
        ("10.0.0.1", False),
        ("[fe80::1%25eth0]", False),
        ("%2Ftmp%2Fjupyter.sock", False),
        ("", False),
        ("localhost.evil.example", False),
    ],
)
def test_host_is_local_as_jupyter_servers_check_host(host: str, local: bool) -> None:
    assert host_is_local(host, LOCAL) is local
    assert host_is_local(host, {**LOCAL, "allow_remote_access": True})


def test_admits_needs_the_token_a_local_host_and_no_origin() -> None:
    def headers(**values: str) -> Any:
        return lambda name: values.get(name)

    ok = {"Authorization": "token s3cret", "Host": "localhost:1"}
    assert admits(headers(**ok), "s3cret", LOCAL)
    assert admits(headers(Authorization="token s3cret"), "s3cret", LOCAL)  # tornado's default
    assert not admits(headers(**ok, Origin=""), "s3cret", LOCAL)
    assert not admits(headers(**{**ok, "Host": "evil.example"}), "s3cret", LOCAL)
    assert not admits(headers(**ok), "other", LOCAL)
    assert not admits(headers(**ok), "", LOCAL)


class Keys:
    """A key store stand-in: `allows` is true for one key and one model."""

    def allows(self, key: str, model: str | None) -> bool:
        return key == "jsk_0123456789ab_secret" and model == "m"


def test_admits_an_inference_key_only_for_its_models() -> None:
    settings = {**LOCAL, "serve_keys": Keys()}
    key = {"Authorization": "Bearer jsk_0123456789ab_secret", "Host": "localhost"}
    assert admits(key.get, "s3cret", settings, "m")
    assert not admits(key.get, "s3cret", settings, "other")
    assert not admits(key.get, "s3cret", settings)
    assert not admits(key.get, "s3cret", LOCAL, "m")  # no store: no keys
    assert not admits({**key, "Origin": "x"}.get, "s3cret", settings, "m")


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("", False),
        ("token=t", True),
        ("a=1&token", True),  # blank, as tornado keeps it
        ("%74oken=t", True),  # percent-encoded key: jupyter_server decodes it
        ("tok%65n=t", True),
        ("xtoken=1&tokens=2", False),
        ("to+ken=t", False),
        ("a=1&" * 16000, False),  # no "token", no "%": not parsed at all
    ],
)
def test_a_token_argument_is_found_as_jupyter_server_reads_it(query: str, found: bool) -> None:
    assert token_argument(query) is found
    assert token_argument("", {"token": [b""]}) is True


def test_token_matches_both_schemes_in_constant_time_compare() -> None:
    assert token_matches("token s3cret", "s3cret")
    assert token_matches("Bearer  s3cret ", "s3cret")
    assert not token_matches("token other", "s3cret")
    assert not token_matches("Basic s3cret", "s3cret")
    assert not token_matches("token ", "")
    assert not token_matches("token s3cret\xa0", "s3cret")  # jupyter_server refuses it too
    assert not token_matches("token s3cret\x85", "s3cret")


REFUSED = [
    {"Host": "evil.example"},
    {"Host": "evil.example:8888"},
    {"Host": "10.1.2.3"},
    {"Origin": "https://evil.example"},
    {"Origin": ""},
]


async def fetch_both(client: Any, url: str, token: str, headers: dict[str, str]) -> list[Any]:
    """The same request with the token as a header (a fast path) and as ?token= (full)."""
    answers = []
    for auth, query in ((f"token {token}", ""), ("", f"?token={token}")):
        response: HTTPResponse = await client.fetch(
            url + query, method="POST", body=b"hi", raise_error=False,
            headers={"Content-Type": "application/octet-stream", "Authorization": auth, **headers},
        )  # fmt: skip
        answers.append((response.code, response.body if response.code != 200 else b"ok"))
    return answers


@pytest.mark.parametrize("headers", REFUSED)
async def test_the_fast_path_answers_as_the_full_route(
    http_server_client: Any, jp_serverapp: Any, jp_base_url: str, headers: dict[str, str]
) -> None:
    await register(jp_serverapp, "probe")
    url = f"{jp_base_url}serve/predictions/probe"
    token = jp_serverapp.identity_provider.token
    fast, full = await fetch_both(http_server_client, url, token, headers)
    assert fast == full
    if "Host" in headers:
        assert fast[0] in (403, 404)  # jupyter_server refused it


async def test_a_remote_host_is_served_with_allow_remote_access(
    http_server_client: Any, jp_serverapp: Any, jp_base_url: str
) -> None:
    jp_serverapp.web_app.settings["allow_remote_access"] = True
    await register(jp_serverapp, "probe")
    token = jp_serverapp.identity_provider.token
    url = f"{jp_base_url}serve/predictions/probe"
    fast, full = await fetch_both(http_server_client, url, token, {"Host": "evil.example"})
    assert fast == full == (200, b"ok")


async def test_a_key_predicts_through_the_fast_path_for_its_models_only(
    http_server_client: Any, jp_serverapp: Any, jp_base_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    fast: list[Any] = []
    answer = FastPredictions.__call__

    def recorded(self: FastPredictions, request: Any, path_args: Any, **kw: Any) -> None:
        fast.append(path_args)
        answer(self, request, path_args, **kw)

    monkeypatch.setattr(FastPredictions, "__call__", recorded)
    settings = jp_serverapp.web_app.settings
    await register(jp_serverapp, "probe")
    await register(jp_serverapp, "other")
    key, _ = settings["serve_keys"].mint("colleague", ["probe"])
    answers = {}
    for model in ("probe", "other"):
        response = await http_server_client.fetch(
            f"{jp_base_url}serve/predictions/{model}", method="POST", body=b"hi",
            headers={"Authorization": f"Bearer {key}", "Content-Type": "text/plain"},
            raise_error=False,
        )  # fmt: skip
        answers[model] = (response.code, response.body)
    assert answers["probe"] == (200, b"hi")
    assert answers["other"][0] == 403  # the full route's refusal
    assert fast == [["probe", None, None]]  # the key's model went the fast way, alone
