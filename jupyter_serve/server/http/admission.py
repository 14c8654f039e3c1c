"""When the fast path may answer a request itself: only with the full route's own decision.

The serve lane (`lane.py`, with `fastpath.py`) answers predictions without building a
jupyter_server handler. A fast path may skip work,
never a check, so it takes a request only when it can tell for certain that
jupyter_server would let it through:

* the server authenticates with its stock identity provider and authorizes with the
  allow-all authorizer (`fast_path_applies`), so a valid token is the whole decision;
  or it is a JupyterHub single-user server whose hub decisions the fast path can
  repeat (`hub_verdicts.py`, kept in `settings["serve_hub_verdicts"]`);
* the `Authorization: token|Bearer T` header carries the server's token
  (`token_matches`, constant time), an inference key that may run the requested
  model (`jupyter_serve.server.keys`, `settings["serve_keys"]`), as the full route's key
  identity and authorizer decide (`base.py`), or a hub token the hub admitted, by a
  verdict still fresh (`Verdict.ASK_HUB` when there is none yet);
* no `token` argument in the query or a form body (`token_argument`): jupyter_server
  and JupyterHub read a token there before the header, so the full route decides;
* the `Host` is one `JupyterHandler.check_host` accepts: any with
  `allow_remote_access`, else a loopback address or one of `local_hostnames`
  (`host_is_local`); a UNIX-socket host or anything unusual is left to the full route;
* there is no `Origin` header (a browser's request: origin checks and CORS headers
  are jupyter_server's).

Every other request goes the full way, where jupyter_server answers it, refusals
included, exactly as for any other route.
"""

from __future__ import annotations

import enum
import functools
import hmac
import ipaddress
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from jupyter_server.auth.authorizer import AllowAllAuthorizer
from jupyter_server.auth.identity import IdentityProvider, PasswordIdentityProvider

from jupyter_serve.server.http.hub_verdicts import HubVerdicts, hub_verdicts
from jupyter_serve.server.keys import bearer_key

VERBS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH"})  # the verbs that predict
_AUTH = re.compile(r"(?:token|bearer)\s+(.+)", re.IGNORECASE)
_HOST_PORT = re.compile(r"(.*?)(?::\d+)?")
HUB_VERDICTS = "serve_hub_verdicts"  # the web app setting holding a server's `HubVerdicts`


class Verdict(enum.Enum):
    """A fast path's decision on a request; only `ADMIT` is true."""

    REFUSE = "the full route decides"
    ADMIT = "a fast path may answer"
    ASK_HUB = "admitted if the hub admits its token (`HubVerdicts.learn`), else refused"

    def __bool__(self) -> bool:
        return self is Verdict.ADMIT


def fast_path_applies(serverapp: Any) -> bool:
    """True when jupyter_server's own auth is a plain token compare (and a token is set)."""
    provider = getattr(serverapp, "identity_provider", None)
    authorizer = getattr(serverapp, "authorizer", None)
    stock_provider = type(provider) in (IdentityProvider, PasswordIdentityProvider)
    return bool(
        stock_provider and type(authorizer) is AllowAllAuthorizer and getattr(provider, "token", "")
    )


def fast_path_token(serverapp: Any) -> Callable[[], str] | None:
    """The token the fast path compares `Authorization` with, or None when no fast path
    applies. Under JupyterHub that is no token (""): the server's own hub API token is
    decided by the hub like any other, and the server's `HubVerdicts` are put in its
    settings for `admits`."""
    if fast_path_applies(serverapp):
        provider = serverapp.identity_provider
        return lambda: str(provider.token or "")
    verdicts = hub_verdicts(serverapp)
    if verdicts is None:
        return None
    serverapp.web_app.settings[HUB_VERDICTS] = verdicts
    return lambda: ""


def token_matches(authorization: str, token: str) -> bool:
    """True when an `Authorization: token|Bearer T` value carries `token` (constant time)."""
    presented = header_token(authorization)
    if not presented or not token:
        return False
    # tornado strips a header value of spaces and tabs only: jupyter_server compares the rest
    return hmac.compare_digest(presented.strip(" \t").encode(), token.encode())


def host_is_local(host: str, settings: Mapping[str, Any]) -> bool:
    """True only when jupyter_server's `check_host` surely accepts this `Host` value."""
    if settings.get("allow_remote_access", False):
        return True
    return _local_host(host, tuple(settings.get("local_hostnames", ["localhost"])))


@functools.lru_cache(maxsize=64)
def _local_host(host: str, local_hostnames: tuple[str, ...]) -> bool:
    """`host_is_local` without remote access (cached: a client sends the same Host)."""
    name = _HOST_PORT.fullmatch(host)
    bare = name.group(1) if name is not None else ""
    if bare.startswith("[") and bare.endswith("]"):
        bare = bare[1:-1]
    if not bare or "%" in bare or "/" in bare:
        return False  # empty, or a UNIX socket path: the full route decides
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return bare in local_hostnames


def credentials_allow(
    authorization: str, token: str, settings: Mapping[str, Any], model: str | None
) -> Verdict:
    """`ADMIT` for the server's token, an inference key that may run `model` or a hub token
    the hub admitted; `ASK_HUB` for a hub token with no fresh verdict."""
    if token_matches(authorization, token):
        return Verdict.ADMIT
    key = bearer_key(authorization)
    keys = settings.get("serve_keys")
    if key is not None and keys is not None and keys.allows(key, model):
        return Verdict.ADMIT
    hub: HubVerdicts | None = settings.get(HUB_VERDICTS)
    presented = header_token(authorization)
    if hub is None or not presented:
        return Verdict.REFUSE
    admitted = hub.verdict(presented)
    if admitted is None:
        return Verdict.ASK_HUB
    return Verdict.ADMIT if admitted else Verdict.REFUSE


def header_token(authorization: str) -> str:
    """The token jupyter_server and JupyterHub read from an `Authorization` value (their
    pattern: the rest of the value after `token ` or `Bearer `, as it is); "" if none."""
    found = _AUTH.match(authorization)
    return found.group(1) if found else ""


def token_argument(query: str, form: Mapping[str, Any] | None = None) -> bool:
    """Whether a `token` argument comes in the query or the (parsed) form body, which
    jupyter_server and JupyterHub read before the header."""
    if form and "token" in form:
        return True
    if "token" not in query and "%" not in query:  # no key can decode to "token": no parse
        return False
    return "token" in parse_qs(query, keep_blank_values=True)


HeaderGetter = Callable[[str], "str | None"]


def admits(
    get_header: HeaderGetter, token: str, settings: Mapping[str, Any], model: str | None = None,
    query: str = "",
) -> Verdict:  # fmt: skip
    """Whether a fast path may answer a request for `model` with these headers and query
    (see the module docstring; a key scoped to some models needs `model`). A form body's
    `token` field is the caller's to check once the body is read (`token_argument`).

    `get_header(name)` reads a request header (None when absent); an `Origin` counts
    even when empty, and a missing `Host` counts as tornado's default, 127.0.0.1, as
    `HTTPServerRequest.host` has it.
    """
    if get_header("Origin") is not None or token_argument(query):
        return Verdict.REFUSE
    if not host_is_local(get_header("Host") or "127.0.0.1", settings):
        return Verdict.REFUSE
    return credentials_allow(get_header("Authorization") or "", token, settings, model)
