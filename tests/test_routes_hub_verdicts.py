"""`HubVerdicts` with JupyterHub's own `HubAuth`, its hub answers given by `user_for_token`.

The hub here is the one method `HubVerdicts` calls on it (`HubAuth.user_for_token`,
replaced on a real `HubAuth` instance, so its own `check_scopes` and `cache_max_age`
decide); the hub process itself is tests/test_routes_hub_lane.py's and test_hub_e2e.py's.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from hub_users import ACCESS, USERS
from jupyter_server.auth.authorizer import AllowAllAuthorizer
from jupyter_server.auth.identity import IdentityProvider

from jupyter_serve.server.http import hub_verdicts as verdicts_module
from jupyter_serve.server.http.admission import HUB_VERDICTS, fast_path_token
from jupyter_serve.server.http.hub_verdicts import HubVerdicts, hub_verdicts, user_only_decision
from jupyter_serve.server.hub import HubScopesAuthorizer

auth = pytest.importorskip("jupyterhub.services.auth")
extension = pytest.importorskip("jupyterhub.singleuser.extension")


class Hub:
    """Answers `user_for_token` from `USERS` (None: the hub does not know the token)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, bool]] = []
        self.failing = False
        self.answer = asyncio.Event()
        self.answer.set()

    async def user_for_token(self, token: str, use_cache: bool = True, session_id: str = "",
                             *, sync: bool = True) -> Any:  # fmt: skip
        assert not sync
        self.asked.append((token, use_cache))
        await self.answer.wait()
        if self.failing:
            raise RuntimeError("the hub is down")
        return USERS.get(token)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def hub_auth(hub: Hub) -> Any:
    made = auth.HubAuth(access_scopes={ACCESS}, cache_max_age=300, api_token="server")
    made.user_for_token = hub.user_for_token
    return made


@pytest.fixture
def hub() -> Hub:
    return Hub()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def verdicts(hub: Hub, clock: Clock) -> HubVerdicts:
    owner_or_scoped = HubScopesAuthorizer(owner="ann")
    decide = user_only_decision(owner_or_scoped, None)
    assert decide is not None
    return HubVerdicts(hub_auth(hub), decide, clock=clock)


async def test_the_owner_and_a_scoped_teammate_are_admitted_others_refused(
    verdicts: HubVerdicts, hub: Hub
) -> None:
    for token in (*USERS, "unknown"):
        assert verdicts.verdict(token) is None
        await verdicts.learn(token)
    assert {token: verdicts.verdict(token) for token in (*USERS, "unknown")} == {
        "ann-token": True,  # the owner
        "bob-token": True,  # execute on serve for ann's server
        "dan-token": False,  # access alone: the authorizer refuses execute
        "eve-token": False,  # execute but no access: the identity provider lets nobody in
        "unknown": False,
    }
    assert all(not use_cache for _, use_cache in hub.asked)  # always a fresh answer


async def test_a_verdict_lasts_the_hubs_cache_max_age_from_the_asking(
    verdicts: HubVerdicts, hub: Hub, clock: Clock
) -> None:
    await verdicts.learn("ann-token")
    clock.now += 299.9
    assert verdicts.verdict("ann-token") is True
    clock.now += 0.1
    assert verdicts.verdict("ann-token") is None  # as old as HubAuth keeps a user: ask again
    await verdicts.learn("ann-token")
    assert verdicts.verdict("ann-token") is True
    assert [token for token, _ in hub.asked] == ["ann-token", "ann-token"]


async def test_concurrent_requests_ask_the_hub_once(verdicts: HubVerdicts, hub: Hub) -> None:
    hub.answer.clear()
    first, second = verdicts.learn("bob-token"), verdicts.learn("bob-token")
    assert first is second
    hub.answer.set()
    await asyncio.gather(first, second)
    assert hub.asked == [("bob-token", False)]
    assert verdicts.verdict("bob-token") is True
    assert verdicts.asking == {}


async def test_a_hub_that_fails_leaves_the_verdict_unknown(verdicts: HubVerdicts, hub: Hub) -> None:
    hub.failing = True
    await verdicts.learn("ann-token")  # never raises
    assert verdicts.verdict("ann-token") is None
    hub.failing = False
    await verdicts.learn("ann-token")
    assert verdicts.verdict("ann-token") is True


async def test_only_digests_are_kept_and_the_oldest_leave_first(
    verdicts: HubVerdicts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verdicts_module, "CAPACITY", 2)
    for token in ("ann-token", "bob-token", "dan-token"):
        await verdicts.learn(token)
    assert "token" not in repr(verdicts.kept)
    assert len(verdicts.kept) == 2
    assert verdicts.verdict("ann-token") is None  # the oldest went
    assert (verdicts.verdict("bob-token"), verdicts.verdict("dan-token")) == (True, False)


def server(provider: Any, authorizer: Any) -> Any:
    return SimpleNamespace(identity_provider=provider, authorizer=authorizer,
                           web_app=SimpleNamespace(settings={}))  # fmt: skip


def test_the_fast_paths_repeat_a_hubs_decision_only_with_an_authorizer_they_know() -> None:
    class Subclassed(HubScopesAuthorizer):
        pass

    provider = extension.JupyterHubIdentityProvider()
    for authorizer in (HubScopesAuthorizer(owner="ann"), AllowAllAuthorizer(),
                       extension.JupyterHubAuthorizer()):  # fmt: skip
        hubbed = server(provider, authorizer)
        token = fast_path_token(hubbed)
        assert token is not None
        assert token() == ""
        assert isinstance(hubbed.web_app.settings[HUB_VERDICTS], HubVerdicts)
    for authorizer in (Subclassed(owner="ann"), object()):
        assert hub_verdicts(server(provider, authorizer)) is None
        assert fast_path_token(server(provider, authorizer)) is None
    stock = server(IdentityProvider(token="t"), AllowAllAuthorizer())
    assert hub_verdicts(stock) is None
    token = fast_path_token(stock)
    assert token is not None
    assert token() == "t"
    assert stock.web_app.settings == {}


def test_jupyterhubs_authorizer_is_repeated_with_its_access_scopes() -> None:
    hub = hub_auth(Hub())
    decide = user_only_decision(extension.JupyterHubAuthorizer(), hub)
    assert decide is not None
    assert decide(USERS["dan-token"])
    assert not decide(USERS["eve-token"])
