"""The route table of jupyter_serve: every REST route, in one visible list.

Patterns are relative to `{base_url}`; `ServeApp` prefixes them with
`url_prefix` ("serve"). Each route module exports its own `ROUTES` list (read
them there); the last entry answers every other path under the prefix with
TorchServe's 404 JSON.
"""

from __future__ import annotations

from typing import Any

from jupyter_serve.server.http import (
    aliases,
    archives,
    inference,
    keys,
    kserve,
    management,
    metrics,
    openai,
    openapi,
    store,
    summary,
)
from jupyter_serve.server.http.access import READ, allow
from jupyter_serve.server.http.base import NOT_FOUND_MESSAGE, ServeRoute
from jupyter_serve.wire.errors import ResourceNotFound


class NotFoundRoute(ServeRoute):
    """Any unknown path under the prefix: 404 ResourceNotFoundException."""

    @allow(READ)
    def _not_found(self, *args: str) -> None:
        raise ResourceNotFound(NOT_FOUND_MESSAGE)

    get = post = put = delete = patch = head = _not_found


ROUTES: list[tuple[str, type[Any]]] = [
    *inference.ROUTES,
    *aliases.ROUTES,
    *management.ROUTES,
    *archives.ROUTES,
    *metrics.ROUTES,
    *kserve.ROUTES,
    *openai.ROUTES,
    *openapi.ROUTES,
    *aliases.LEGACY_ROUTES,
    *keys.ROUTES,  # after the legacy routes: `keys/predict` stays a model named "keys"
    *store.ROUTES,
    *summary.ROUTES,
    kserve.NOT_FOUND_ROUTE,  # other v2 paths: the 404 KServe's and Triton's clients read
    (r".*", NotFoundRoute),
]
