"""GETs that run a model or hand out its archive, made with the login cookie alone.

jupyter_server asks the XSRF token only of POST, PUT, PATCH and DELETE, so a link
on another site could run `serve/{m}/predict?cmd=x` with the user's cookie; these
routes ask it of GET too, and refuse what the browser marks as cross-site
(`ServeRoute.check_cookie_get`). Token and key clients are unaffected.
"""

from __future__ import annotations

from typing import Any

import pytest
from route_models import register, server_config

XSRF = "6a73657276652d78737266"  # a matching cookie + header pair passes the XSRF check


async def _login_cookie(jp_fetch: Any) -> str:
    """The login cookie a browser holds after a token-authenticated request."""
    ping = await jp_fetch("serve", "ping")
    cookies = [value.split(";", 1)[0] for value in ping.headers.get_list("Set-Cookie")]
    (cookie,) = [value for value in cookies if not value.startswith("_xsrf=")]
    return cookie


@pytest.fixture
def jp_server_config(tmp_path: Any) -> dict[str, Any]:
    return server_config(tmp_path)


COOKIE_GETS = [("predictions", "probe"), ("probe", "predict"), ("models", "probe", "invoke"),
               ("explanations", "probe"), ("models", "probe", "1.0", "archive")]  # fmt: skip


@pytest.mark.parametrize("path", COOKIE_GETS)
async def test_a_cookie_get_that_runs_a_model_needs_xsrf_and_the_same_site(
    jp_fetch: Any, jp_serverapp: Any, path: tuple[str, ...]
) -> None:
    await register(jp_serverapp)
    cookie = await _login_cookie(jp_fetch)
    browser = {"Authorization": "", "Cookie": f"{cookie}; _xsrf={XSRF}"}

    async def status(headers: dict[str, str], **params: str) -> int:
        answer = await jp_fetch("serve", *path, headers=headers, params=params, raise_error=False)
        return int(answer.code)

    assert await status(browser) == 403  # a top-level link from anywhere: no XSRF token
    assert await status(browser, _xsrf="forged") == 403  # a guessed token, no same-site referer
    cross_site = {**browser, "X-XSRFToken": XSRF, "Sec-Fetch-Site": "cross-site"}
    assert await status(cross_site) == 403
    assert await status({**cross_site, "Sec-Fetch-Site": "same-site"}) == 403
    assert await status({**cross_site, "Sec-Fetch-Site": "same-origin"}) == 200  # the panel
    assert await status({**browser}, _xsrf=XSRF) == 200
    token = jp_serverapp.identity_provider.token
    assert await status({"Authorization": f"token {token}", "Sec-Fetch-Site": "cross-site"}) == 200
