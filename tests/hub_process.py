"""A real JupyterHub 6 for end-to-end tests: bench/hub_launcher.py's `Hub` (configurable-
http-proxy, SimpleLocalProcessSpawner, single-user servers running jupyter_serve), plus
what only the tests do with it: log in through the hub's login page as a browser would.

`available()` says why these tests cannot run here (no `configurable-http-proxy`, no
jupyterhub), or None.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from hub_launcher import SERVICE_TOKEN, WAIT, Hub, available

__all__ = ["SERVICE_TOKEN", "HubProcess", "available"]


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
    def browser(self, user: str, password: str, page: str) -> Iterator[httpx.Client]:
        """A client holding `user`'s login cookies, as a browser would after logging in to
        the hub and opening `page` of a server (the hub's OAuth dance, followed)."""
        with httpx.Client(base_url=self.url, timeout=WAIT, follow_redirects=True) as client:
            client.get("/hub/login")
            xsrf = client.cookies.get("_xsrf", path="/hub/")
            form = {"username": user, "password": password, "_xsrf": xsrf or ""}
            assert client.post("/hub/login", data=form).is_success
            opened = client.get(page)
            assert opened.is_success, (opened.url, opened.status_code)
            yield client
