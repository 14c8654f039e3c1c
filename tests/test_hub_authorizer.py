"""`jupyter_serve.server.hub.HubScopesAuthorizer` without a hub: scope matching, owner, strangers.

The users are what JupyterHub's identity provider hands the authorizer: an object with
the hub's user model in `hub_user` (`scopes` included). The last test builds one with
JupyterHub's own `JupyterHubUser`, so a change of that public attribute fails here.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from jupyter_server.auth.authorizer import AllowAllAuthorizer
from jupyter_server.auth.identity import IdentityProvider

from jupyter_serve.server.http.admission import fast_path_applies
from jupyter_serve.server.hub import HubScopesAuthorizer, grants, required_scope, scopes_allow

OWNER = "ann"
EXECUTE = "custom:jupyter_server:execute:serve"


def authorizer(server_name: str = "") -> HubScopesAuthorizer:
    return HubScopesAuthorizer(owner=OWNER, server_name=server_name)


def hub_user(name: str, *scopes: str, kind: str = "user") -> Any:
    return SimpleNamespace(username=name, hub_user={"kind": kind, "name": name,
                                                     "scopes": list(scopes)})  # fmt: skip


@pytest.mark.parametrize(
    ("scope", "server_name", "granted"),
    [
        (EXECUTE, "", True),  # no filter: every server
        (f"{EXECUTE}!user={OWNER}", "", True),
        (f"{EXECUTE}!user={OWNER}", "gpu", True),  # a user filter covers all their servers
        (f"{EXECUTE}!server={OWNER}/", "", True),
        (f"{EXECUTE}!server={OWNER}/gpu", "gpu", True),
        (f"{EXECUTE}!server={OWNER}/", "gpu", False),  # another of the owner's servers
        (f"{EXECUTE}!server={OWNER}/gpu", "", False),
        (f"{EXECUTE}!user=bob", "", False),  # someone else's server
        (f"{EXECUTE}!user={OWNER}x", "", False),
        (f"{EXECUTE}!server={OWNER}x/", "", False),
        (f"{EXECUTE}!group=team", "", False),  # the owner's groups are unknown here
        (f"{EXECUTE}!service={OWNER}", "", False),
        (f"{EXECUTE}!user", "", False),  # unexpanded: never this server for sure
        ("custom:jupyter_server:execute:serve2", "", False),  # a different scope
        ("custom:jupyter_server:execute", "", False),  # a parent name: the hub expands those
        ("custom:jupyter_server:write:serve", "", False),
        ("access:servers", "", False),
    ],
)
def test_one_scope_grants_only_its_action_on_this_server(
    scope: str, server_name: str, granted: bool
) -> None:
    assert grants(scope, EXECUTE, OWNER, server_name) is granted


def test_the_scope_an_action_needs() -> None:
    assert required_scope("execute", "serve") == EXECUTE
    assert required_scope("read", "contents") == "custom:jupyter_server:read:contents"
    scopes = ["access:servers!user=ann", f"{EXECUTE}!user=bob", f"{EXECUTE}!server=ann/"]
    assert scopes_allow(scopes, "execute", "serve", OWNER)
    assert not scopes_allow(scopes, "read", "serve", OWNER)
    assert not scopes_allow(scopes, "execute", "serve", OWNER, "gpu")


def test_the_owner_may_do_everything_without_any_custom_scope() -> None:
    owner = hub_user(OWNER, "access:servers!server=ann/")
    for action in ("read", "write", "execute"):
        for resource in ("serve", "contents", "kernels", "terminals", "anything"):
            assert authorizer().is_authorized(None, owner, action, resource)


PREDICT_ONLY = (
    "access:servers!user=ann",
    "custom:jupyter_server:read:serve!user=ann",
    "custom:jupyter_server:execute:serve!user=ann",
)


def test_a_teammate_gets_exactly_the_scopes_granted_for_this_server() -> None:
    teammate = hub_user("bob", *PREDICT_ONLY)
    allowed = {
        (action, resource)
        for action in ("read", "write", "execute")
        for resource in ("serve", "contents", "kernels", "sessions", "terminals", "api")
        if authorizer().is_authorized(None, teammate, action, resource)
    }
    assert allowed == {("read", "serve"), ("execute", "serve")}
    assert not authorizer("gpu").is_authorized(None, hub_user("bob", f"{EXECUTE}!server=ann/"),
                                               "execute", "serve")  # fmt: skip


@pytest.mark.parametrize(
    "user",
    [
        hub_user(OWNER, "access:servers!user=ann", kind="service"),  # named like the owner
        SimpleNamespace(username=OWNER),  # no hub model: not authenticated by the hub
        SimpleNamespace(username=OWNER, hub_user="ann"),
        hub_user("bob"),  # access alone grants nothing
    ],
)
def test_anyone_else_gets_nothing(user: Any) -> None:
    assert not authorizer().is_authorized(None, user, "read", "serve")
    assert not authorizer().is_authorized(None, user, "write", "contents")


def test_no_owner_means_no_one_is_the_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    monkeypatch.setenv("JUPYTERHUB_SERVER_NAME", "gpu")
    unowned = HubScopesAuthorizer()
    assert (unowned.owner, unowned.server_name) == ("", "gpu")
    assert not unowned.is_authorized(None, hub_user(""), "read", "serve")
    monkeypatch.setenv("JUPYTERHUB_USER", OWNER)
    assert HubScopesAuthorizer().is_authorized(None, hub_user(OWNER), "write", "serve")


def test_jupyterhubs_user_carries_the_model_the_authorizer_reads() -> None:
    """The one thing read from JupyterHub: `JupyterHubUser.hub_user`, the hub's user model."""
    extension = pytest.importorskip("jupyterhub.singleuser.extension")
    model = {"kind": "user", "name": "bob", "scopes": list(PREDICT_ONLY)}
    user = extension.JupyterHubUser(model)
    assert user.hub_user is model
    assert authorizer().is_authorized(None, user, "execute", "serve")
    assert not authorizer().is_authorized(None, user, "write", "serve")


def test_the_stock_token_compare_is_never_assumed_under_a_hub() -> None:
    """`fast_path_applies` (a token compare is the whole decision) holds only for
    jupyter_server's stock provider with allow-all; a hub's decisions reach the fast paths
    as the hub's own verdicts instead (tests/test_routes_hub_verdicts.py)."""
    extension = pytest.importorskip("jupyterhub.singleuser.extension")
    hub = SimpleNamespace(identity_provider=extension.JupyterHubIdentityProvider(),
                          authorizer=authorizer())  # fmt: skip
    assert not fast_path_applies(hub)
    stock = SimpleNamespace(identity_provider=IdentityProvider(token="t"), authorizer=authorizer())
    assert not fast_path_applies(stock)
    stock.authorizer = AllowAllAuthorizer()
    assert fast_path_applies(stock)  # the one case they serve
