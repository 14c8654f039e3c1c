"""A real JupyterHub 6 for end-to-end tests: bench/hub_launcher.py's `Hub` (configurable-
http-proxy, SimpleLocalProcessSpawner, single-user servers running jupyter_serve), plus
what only the tests do with it: log in through the hub's login page as a browser would.

`available()` says why these tests cannot run here (no `configurable-http-proxy`, no
jupyterhub), or None.
"""

from __future__ import annotations

import contextlib
import html
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from hub_launcher import SERVICE_TOKEN, WAIT, Hub, available

__all__ = ["SERVICE_TOKEN", "HubProcess", "available"]

CONSENT_PAGE = "/hub/api/oauth2/authorize"
HIDDEN_INPUT = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"')


def authorize(client: httpx.Client, consent: httpx.Response) -> None:
    """Click "Authorize" on the hub's consent page (a server of another user asks for the
    scopes it lists): post its form, hidden inputs and all, to the page."""
    fields = [(name, html.unescape(value)) for name, value in HIDDEN_INPUT.findall(consent.text)]
    form: dict[str, Any] = {name: value for name, value in fields if name != "scopes"}
    form["scopes"] = [value for name, value in fields if name == "scopes"]
    assert "_xsrf" in form, consent.text[:500]
    assert client.post(consent.url, data=form).is_success


class HubProcess(Hub):
    """The hub, with a browser's login."""

    @classmethod
    @contextlib.contextmanager
    def serving(cls, folder: Path, settings: dict[str, Any], user: str) -> Iterator[HubProcess]:
        """The hub with `settings` and `user`'s server spawned; stopped (with all it started)
        on exit."""
        hub = cls(folder, settings)
        try:
            hub.start().spawn(user)
            yield hub
        finally:
            hub.stop()

    @contextlib.contextmanager
    def browser(
        self, user: str, password: str, page: str, opens: bool = True
    ) -> Iterator[httpx.Client]:
        """A client holding `user`'s login cookies, as a browser would after logging in to
        the hub and opening `page` of a server (the hub's OAuth dance, followed), which
        must answer unless not `opens` (a teammate's browser may not see the page itself)."""
        with httpx.Client(base_url=self.url, timeout=WAIT, follow_redirects=True) as client:
            client.get("/hub/login")
            xsrf = client.cookies.get("_xsrf", path="/hub/")
            form = {"username": user, "password": password, "_xsrf": xsrf or ""}
            logged_in = client.post("/hub/login", data=form, params={"next": page})
            assert logged_in.is_success
            if logged_in.url.path.endswith(CONSENT_PAGE):
                authorize(client, logged_in)  # another user's server: the hub asks first
            opened = client.get(page)
            assert opened.is_success or not opens, (opened.url, opened.status_code)
            yield client
