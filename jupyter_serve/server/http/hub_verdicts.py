"""`HubVerdicts`: the hub's own decision on a hub token, learnt once and kept as the hub keeps it.

Under JupyterHub, jupyter_server's full route decides a request with
`Authorization: token T` in three steps, each JupyterHub's or this server's own:

1. JupyterHub's identity provider asks the hub who T is (`HubAuth.user_for_token`,
   cached by `HubAuth` for `cache_max_age` seconds);
2. it lets the user in only with the hub's access scopes for this server
   (`HubAuth.check_scopes(access_scopes, model)`);
3. the server's authorizer decides `execute` on `serve` for that user.

The fast path (the serve lane, `lane.py`) applies exactly that decision to hub tokens:
`learn(T)` asks the hub once with `HubAuth`'s public `user_for_token` (bypassing its
cache, so the answer is fresh), applies steps 2 and 3 to the answer, and keeps the
verdict for the hub's own `cache_max_age`, as `HubAuth` keeps the user. A token the
hub revokes therefore stops working on a fast path no later than on the full route.
Only the verdict and a digest of the token are kept, never the token itself.

Step 3 runs for the authorizers whose decision depends on the user alone
(`user_only_decision`: jupyter_server's allow-all, JupyterHub's `JupyterHubAuthorizer`
and `jupyter_serve.server.hub.HubScopesAuthorizer`); with any other authorizer `hub_verdicts`
gives None and hub tokens always take the full route. A refused or unknown token is
never answered by a fast path: the full route refuses it with jupyter_server's own
answer. So is a token the hub could not be asked about (an error is not cached).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from jupyter_server.auth.authorizer import AllowAllAuthorizer

from jupyter_serve.server.http.access import EXECUTE, RESOURCE
from jupyter_serve.server.hub import HubScopesAuthorizer

LOGGER = logging.getLogger(__name__)

CAPACITY = 4096  # verdicts kept at most (the oldest go first)
HUB_IDENTITY_PROVIDER = ("jupyterhub.singleuser.extension", "JupyterHubIdentityProvider")
HUB_AUTHORIZER = ("jupyterhub.singleuser.extension", "JupyterHubAuthorizer")


def _class_is(obj: Any, where: tuple[str, str]) -> bool:
    """Whether `obj`'s own class is exactly `module.name` (no subclass: it may decide otherwise)."""
    cls = type(obj)
    return (cls.__module__, cls.__qualname__) == where


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


class HubVerdicts:
    """Verdicts on hub tokens (`verdict`), learnt from the hub (`learn`); module docstring."""

    def __init__(self, hub_auth: Any, allows: Callable[[Mapping[str, Any]], bool],
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.hub_auth = hub_auth
        self.allows = allows
        self.clock = clock
        self.kept: dict[str, tuple[bool, float]] = {}  # digest -> (admitted, expires at)
        self.asking: dict[str, asyncio.Future[None]] = {}

    def verdict(self, token: str) -> bool | None:
        """True or False while the hub's answer on `token` is fresh; None when not known."""
        kept = self.kept.get(digest(token))
        if kept is None:
            return None
        admitted, expires = kept
        if self.clock() >= expires:
            return None
        return admitted

    def learn(self, token: str) -> asyncio.Future[None]:
        """Ask the hub about `token` (once at a time per token); done when it has answered
        or failed. It never raises: a failure just leaves the verdict unknown."""
        key = digest(token)
        asking = self.asking.get(key)
        if asking is None:
            asking = asyncio.ensure_future(self._ask(key, token))
            self.asking[key] = asking
            asking.add_done_callback(lambda _: self.asking.pop(key, None))
        return asking

    async def _ask(self, key: str, token: str) -> None:
        asked_at = self.clock()
        try:
            model = await self.hub_auth.user_for_token(token, use_cache=False, sync=False)
        except Exception as error:  # the hub is unreachable or answered an error
            LOGGER.debug("jupyter_serve: the hub could not say who a token is: %s", error)
            return
        admitted = isinstance(model, Mapping) and self.admitted(model)
        self.keep(key, admitted, asked_at + float(self.hub_auth.cache_max_age))

    def admitted(self, model: Mapping[str, Any]) -> bool:
        """Steps 2 and 3 of the module docstring for the hub's model of a user."""
        if not self.hub_auth.check_scopes(self.hub_auth.access_scopes, model):
            return False
        return self.allows(model)

    def keep(self, key: str, admitted: bool, expires: float) -> None:
        """Keep a verdict, last: verdicts all live `cache_max_age`, so the first kept are
        the first stale, and go first when `CAPACITY` is reached."""
        self.kept.pop(key, None)
        while len(self.kept) >= CAPACITY:
            del self.kept[next(iter(self.kept))]
        self.kept[key] = (admitted, expires)


def user_only_decision(
    authorizer: Any, hub_auth: Any
) -> Callable[[Mapping[str, Any]], bool] | None:
    """Step 3 as a function of the hub's user model, for the authorizers that decide by the
    user alone; None for any other."""
    if type(authorizer) is AllowAllAuthorizer:
        return lambda model: True
    if type(authorizer) is HubScopesAuthorizer:
        return lambda model: authorizer.allows(model, EXECUTE, RESOURCE)
    if _class_is(authorizer, HUB_AUTHORIZER):
        return lambda model: bool(hub_auth.check_scopes(hub_auth.access_scopes, model))
    return None


def hub_verdicts(serverapp: Any) -> HubVerdicts | None:
    """Verdicts for a single-user server run by JupyterHub with an authorizer that decides by
    the user alone (`user_only_decision`); None for any other server."""
    provider: Any = getattr(serverapp, "identity_provider", None)
    if not _class_is(provider, HUB_IDENTITY_PROVIDER):
        return None
    hub_auth = provider.hub_auth
    allows = user_only_decision(getattr(serverapp, "authorizer", None), hub_auth)
    return None if allows is None else HubVerdicts(hub_auth, allows)
