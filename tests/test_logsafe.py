"""Tests for what serve log lines show of a request: no credential, no control character."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.utils import url_path_join
from route_models import register, server_config
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_serve.wire.logsafe import printable, scrub_uri

Fetch = Callable[..., Awaitable[HTTPResponse]]
SEEN = {"Content-Type": "application/json", "X-Mode": "seen"}
REFERER = """
def handle(data, context):
    return [context.get_request_header(0, "Referer")] if data else None
"""


def test_scrub_uri_hides_what_jupyter_server_hides_in_its_access_log() -> None:
    assert (
        scrub_uri("/serve/models/x?token=abc&limit=3") == "/serve/models/x?token=[secret]&limit=3"
    )
    assert scrub_uri("/p?_xsrf=1&api_key=2&Authorization=3") == (
        "/p?_xsrf=[secret]&api_key=[secret]&Authorization=[secret]"
    )
    assert scrub_uri("/p?%74oken=abc") == "/p?%74oken=[secret]"  # read as `token` by tornado
    assert scrub_uri("/p?flag") == "/p?flag"
    assert scrub_uri("/serve/ping") == "/serve/ping"


def test_printable_escapes_control_and_format_characters() -> None:
    assert printable("resnet-18 v1.0") == "resnet-18 v1.0"
    assert printable("a\nb\r\x1b[31mc\x00\x7f") == "a\\nb\\r\\x1b[31mc\\x00\\x7f"
    assert printable("evil\u202etxt.mar\u2028") == "evil\\u202etxt.mar\\u2028"
    assert printable("\u00e9t\u00e9 \u6a21\u578b") == "\u00e9t\u00e9 \u6a21\u578b"  # letters stay


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


def serve_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages of the serve routes' own lines (not jupyter_server's access log)."""
    return [r.getMessage() for r in caplog.records if r.funcName != "log_request"]


async def test_a_refused_request_logs_its_uri_without_the_token(
    jp_fetch: Fetch, jp_serverapp: Any, caplog: pytest.LogCaptureFixture
) -> None:
    token = jp_serverapp.identity_provider.token
    with caplog.at_level(logging.INFO):
        answer = await jp_fetch("serve", "models", "nope", params={"token": token},
                                headers={"Authorization": ""}, raise_error=False)  # fmt: skip
    assert answer.code == 404
    lines = serve_lines(caplog)
    assert any("/serve/models/nope?token=[secret]" in line for line in lines), lines
    assert token not in caplog.text


async def test_a_refused_prediction_logs_no_token(
    jp_fetch: Fetch, jp_serverapp: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await register(jp_serverapp)
    token = jp_serverapp.identity_provider.token
    with caplog.at_level(logging.INFO):
        answer = await jp_fetch("serve", "predictions", "probe", "9.9", method="POST",
                                body=b"[]", params={"token": token}, headers=dict(SEEN),
                                raise_error=False)  # fmt: skip
    assert answer.code == 404
    assert token not in caplog.text


async def test_names_with_newlines_and_escapes_are_logged_escaped(
    jp_serverapp: Any, http_server_client: Any, jp_base_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    url = url_path_join(jp_base_url, "serve/models/a%0Aforged%1B%5B31m%E2%80%AE")
    token = jp_serverapp.identity_provider.token
    with caplog.at_level(logging.INFO):
        answer = await http_server_client.fetch(url, headers={"Authorization": f"token {token}"},
                                                raise_error=False)  # fmt: skip
    assert answer.code == 404
    assert "a\nforged" in json.loads(answer.body)["message"]  # the answer names it as it is
    logged = [line for line in serve_lines(caplog) if "forged" in line]
    assert logged
    assert all("\n" not in line for line in logged), logged
    assert all("\x1b" not in line for line in logged), logged
    assert any("a\\nforged\\x1b[31m\\u202e" in line for line in logged), logged


async def test_alias_routes_never_hand_the_token_or_xsrf_to_the_handler(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    token = jp_serverapp.identity_provider.token
    query = {"token": token, "_xsrf": "x1", "k": "v", "model_name": "probe"}
    for path in (("invocations",), ("models", "probe", "invoke"), ("probe", "predict"),
                 ("probe", "1.0", "predict")):  # fmt: skip
        answer = await jp_fetch("serve", *path, method="POST", body="[1]", params=query,
                                headers={**SEEN, "Authorization": ""})  # fmt: skip
        seen = json.loads(answer.body)
        assert "token" not in seen["keys"], (path, seen)
        assert "_xsrf" not in seen["keys"], (path, seen)
        assert "k" in seen["keys"], path
        assert token not in answer.body.decode(), path


async def test_form_fields_named_token_or_xsrf_never_reach_the_handler(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    token = jp_serverapp.identity_provider.token  # jupyter_server reads a form's `token` too
    # tornado parses a body whose type only starts with the form type as a form as well
    for path, kind in itertools.product((("predictions", "probe"), ("probe", "predict")),
                                        ("", "X", "; charset=utf-8")):  # fmt: skip
        answer = await jp_fetch("serve", *path, method="POST", body=f"data=1&token={token}&_xsrf=x",
                                headers={"Content-Type": f"application/x-www-form-urlencoded{kind}",
                                         "X-Mode": "seen"})  # fmt: skip
        assert json.loads(answer.body)["keys"] == ["data"], (path, kind)
    parts = [
        ("data", "", "1"),
        ("_xsrf", 'filename="x.txt"', "x"),
        ("token", 'filename="t.txt"', token),
    ]  # uploaded files under those names too
    body = "".join(f'--B\r\nContent-Disposition: form-data; name="{name}"'
                   f"{'; ' + extra if extra else ''}\r\n\r\n{value}\r\n"
                   for name, extra, value in parts) + "--B--\r\n"  # fmt: skip
    answer = await jp_fetch("serve", "predictions", "probe", method="POST", body=body,
                            headers={"Content-Type": "multipart/form-data; boundary=B",
                                     "X-Mode": "seen"})  # fmt: skip
    assert json.loads(answer.body)["keys"] == ["data"]
    with pytest.raises(HTTPClientError) as refused:  # a type tornado parses, then refuses
        await jp_fetch("serve", "predictions", "probe", method="POST", body=body,
                       headers={"Content-Type": "multipart/form-dataX; boundary=B"})  # fmt: skip
    assert refused.value.code == 400


async def test_a_wrong_token_in_a_form_is_refused_on_every_path(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    """jupyter_server reads a form's `token` before the header: a wrong one is refused,
    whatever the form's type looks like and however the body is framed."""
    await register(jp_serverapp)
    for kind in ("application/x-www-form-urlencoded", "application/x-www-form-urlencodedX"):
        with pytest.raises(HTTPClientError) as refused:
            await jp_fetch("serve", "predictions", "probe", method="POST",
                           body="data=1&token=WRONG", headers={"Content-Type": kind})  # fmt: skip
        assert refused.value.code == 403, kind


def test_worker_lines_reach_the_server_log_escaped(caplog: pytest.LogCaptureFixture) -> None:
    from jupyter_serve.server.pool.logs import WorkerLog

    log = WorkerLog("echo")
    with caplog.at_level(logging.INFO, logger="jupyter_serve.worker"):
        log.emit("w1", "input: \x1b[2J\x1b[31mFAKE ERROR\r")
    assert caplog.messages == ["[echo/w1] input: \\x1b[2J\\x1b[31mFAKE ERROR\\r"]
    assert log.recent()[-1].endswith("input: \x1b[2J\x1b[31mFAKE ERROR\r")  # kept as printed


async def test_a_referer_reaches_the_handler_without_the_pages_token(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    """A browser sends the page's url (JupyterLab opened with `?token=`) as `Referer`."""
    await register(jp_serverapp, "headers", source=REFERER)
    token = jp_serverapp.identity_provider.token
    page = f"http://localhost:8888/lab?token={token}&reset"
    answer = await jp_fetch("serve", "predictions", "headers", method="POST", body=b"x",
                            headers={"Referer": page})  # fmt: skip
    assert answer.body == b"http://localhost:8888/lab?token=[secret]&reset"
