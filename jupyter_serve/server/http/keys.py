"""Inference keys over REST: list, mint and revoke them (each verb needs `write` on `serve`).

* ``GET keys``: ``{"keys": [{"id", "name", "models", "created"}, ...]}``, oldest
  first, never a secret (``"models": null`` means every model);
* ``POST keys`` with ``name`` and ``models`` (a comma list, or a JSON list in a
  JSON body) from a JSON body or the query: the new key's fields and
  ``"key"``, the secret, which is shown this once;
* ``DELETE keys/{id}``: ``{"status": "Key <id> revoked."}``; an unknown id is a 404.

Whoever may change what is served may hand out the right to run it. The store is
`jupyter_serve.server.keys.KeyStore` (`settings["serve_keys"]`); how a key authenticates
is in server/http/base.py.
"""

from __future__ import annotations

from typing import Any

from jupyter_serve.server.http.access import WRITE, allow
from jupyter_serve.server.http.management import ManagementRoute
from jupyter_serve.server.keys import KeyStore
from jupyter_serve.wire.errors import BadRequest, ResourceNotFound


def models_arg(value: Any) -> list[str] | None:
    """A key's scope as sent: a comma list or a list of names; None (every model) if absent."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.split(",")
    if isinstance(value, list) and all(isinstance(name, str) for name in value):
        return value
    raise BadRequest('"models" must be a comma-separated string or a list of model names.')


class KeyStoreRoute(ManagementRoute):
    @property
    def key_store(self) -> KeyStore:
        keys: KeyStore = self.settings["serve_keys"]
        return keys


class KeysRoute(KeyStoreRoute):
    """`GET keys` lists the inference keys; `POST keys` mints one."""

    @allow(WRITE)
    def get(self) -> None:
        self.write_json({"keys": [info.to_json() for info in self.key_store.list_keys()]})

    @allow(WRITE)
    def post(self) -> None:
        args = self.body_or_query()
        name = args.get("name") or ""
        if not isinstance(name, str):
            raise BadRequest('"name" must be a string.')
        try:
            key, info = self.key_store.mint(name, models_arg(args.get("models")))
        except ValueError as error:
            raise BadRequest(str(error)) from None
        self.write_json({**info.to_json(), "key": key})


class KeyRoute(KeyStoreRoute):
    """`DELETE keys/{id}` revokes a key at once."""

    @allow(WRITE)
    def delete(self, key_id: str) -> None:
        if not self.key_store.revoke(key_id):
            raise ResourceNotFound(f"Key not found: {key_id}")
        self.write_json({"status": f"Key {key_id} revoked."})


ROUTES: list[tuple[str, type[Any]]] = [
    (r"keys/?", KeysRoute),
    (r"keys/([^/]+)/?", KeyRoute),
]
