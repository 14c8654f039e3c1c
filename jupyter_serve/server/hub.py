"""`HubScopesAuthorizer`: JupyterHub's custom scopes decide who may do what in a user's server.

JupyterHub's single-user server authenticates everyone holding `access:servers` on it
and then installs no authorizer, so jupyter_server's allow-all lets a teammate let in
for predictions also register models, mint keys and open the owner's files, kernels
and terminals. Installed in the single-user server with::

    c.ServerApp.authorizer_class = "jupyter_serve.hub.HubScopesAuthorizer"

it decides every `@authorized` check of jupyter_server and jupyter_serve this way:

* the owner of this server (a hub *user* named `$JUPYTERHUB_USER`) may do everything;
* anyone else (another user, a service) may do `action` on `resource` only when the
  scopes the hub resolved for them hold `custom:jupyter_server:{action}:{resource}`
  for this server: with no filter, `!user=OWNER` or `!server=OWNER/NAME` (`NAME`,
  `$JUPYTERHUB_SERVER_NAME`, is empty for the default server). Group filters are not
  honoured (the server does not know its owner's groups): grant to users or roles;
* a request the hub did not authenticate may do nothing (inference keys are decided
  before this authorizer is asked: `server/http/base.py`).

The scopes are the ones JupyterHub's identity provider already fetched with the user
(its `JupyterHubUser.hub_user`, the hub's user model, `scopes` included), so a check
costs no request to the hub. The hub must declare the scopes (`c.JupyterHub.custom_scopes`)
and grant them in roles; see the README's JupyterHub section. `jupyterhub` itself is not
imported: the user model is read as the public attribute it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from jupyter_server.auth.authorizer import Authorizer
from traitlets import Unicode, default

from jupyter_serve.wire.logsafe import printable

SCOPE_PREFIX = "custom:jupyter_server"


def required_scope(action: str, resource: str) -> str:
    """The custom scope granting `action` on `resource`: `custom:jupyter_server:execute:serve`."""
    return f"{SCOPE_PREFIX}:{action}:{resource}"


def grants(scope: str, wanted: str, owner: str, server_name: str = "") -> bool:
    """Whether one scope the hub resolved grants `wanted` on the server `owner/server_name`:
    the same name, and no filter or a user or server filter naming this server."""
    name, filtered, where = scope.partition("!")
    if name != wanted:
        return False
    if not filtered:
        return True
    kind, _, value = where.partition("=")
    if kind == "user":
        return value == owner
    if kind == "server":
        return value == f"{owner}/{server_name}"
    return False  # group, service or an unknown filter: never this server's for sure


def scopes_allow(
    scopes: Iterable[str], action: str, resource: str, owner: str, server_name: str = ""
) -> bool:
    """Whether any of `scopes` grants `action` on `resource` of the server `owner/server_name`."""
    wanted = required_scope(action, resource)
    return any(grants(scope, wanted, owner, server_name) for scope in scopes)


def hub_model(user: Any) -> Mapping[str, Any] | None:
    """The hub's model of an authenticated user (`JupyterHubUser.hub_user`), else None."""
    model = getattr(user, "hub_user", None)
    return model if isinstance(model, Mapping) else None


class HubScopesAuthorizer(Authorizer):
    """The owner may do everything; anyone else what the hub's custom scopes grant here."""

    owner = Unicode(help="The hub user who owns this server (default: $JUPYTERHUB_USER).").tag(
        config=True
    )
    server_name = Unicode(
        help="This server's name, empty for the default one (default: $JUPYTERHUB_SERVER_NAME)."
    ).tag(config=True)

    @default("owner")
    def _default_owner(self) -> str:
        owner = os.environ.get("JUPYTERHUB_USER", "")
        if not owner:
            self.log.warning("HubScopesAuthorizer: no $JUPYTERHUB_USER, so no one owns this server")
        return owner

    @default("server_name")
    def _default_server_name(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVER_NAME", "")

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        """True for the owner, else only with a custom scope for this server (module docstring)."""
        model = hub_model(user)
        if model is None:
            return False
        allowed = self.allows(model, action, resource)
        if not allowed:
            who = printable(f"{model.get('kind')} {model.get('name')}")
            self.log.info("%s may not %s %s here: no %s for this server", who, action,
                          resource, required_scope(action, resource))  # fmt: skip
        return allowed

    def allows(self, model: Mapping[str, Any], action: str, resource: str) -> bool:
        """The decision for the hub's model of a user (the serve lane asks it too:
        `server/http/hub_verdicts.py`)."""
        if self.is_owner(model):
            return True
        scopes = model.get("scopes") or ()
        return scopes_allow(scopes, action, resource, self.owner, self.server_name)

    def is_owner(self, model: Mapping[str, Any]) -> bool:
        """Whether the hub's model is this server's owner (a user, never a service)."""
        return bool(self.owner) and model.get("kind") == "user" and model.get("name") == self.owner
