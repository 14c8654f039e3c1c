"""When a fast path may answer a request itself: only with the full route's own decision.

The serve lane (`lane.py`) and the lean routing rule (`fastpath.py`) answer
predictions without building a jupyter_server handler. A fast path may skip work,
never a check, so it takes a request only when it can tell for certain that
jupyter_server would let it through:

* the server authenticates with its stock identity provider and authorizes with the
  allow-all authorizer (`fast_path_applies`), so a valid token is the whole decision;
* the `Authorization: token|Bearer T` header carries the server's token
  (`token_matches`, constant time) or an inference key that may run the requested
  model (`jupyter_serve.keys`, `settings["serve_keys"]`), as the full route's key
  identity and authorizer decide (`base.py`);
* the `Host` is one `JupyterHandler.check_host` accepts: any with
  `allow_remote_access`, else a loopback address or one of `local_hostnames`
  (`host_is_local`); a UNIX-socket host or anything unusual is left to the full route;
* there is no `Origin` header (a browser's request: origin checks and CORS headers
  are jupyter_server's).

Every other request goes the full way, where jupyter_server answers it, refusals
included, exactly as for any other route.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jupyter_server.auth.authorizer import AllowAllAuthorizer
from jupyter_server.auth.identity import IdentityProvider, PasswordIdentityProvider

from ..keys import bearer_key

VERBS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH"})  # the verbs that predict
_AUTH = re.compile(r"(?:token|bearer)\s+(.+)", re.IGNORECASE)
_HOST_PORT = re.compile(r"(.*?)(?::\d+)?")


def fast_path_applies(serverapp: Any) -> bool:
    """True when jupyter_server's own auth is a plain token compare (and a token is set)."""
    provider = getattr(serverapp, "identity_provider", None)
    authorizer = getattr(serverapp, "authorizer", None)
    stock_provider = type(provider) in (IdentityProvider, PasswordIdentityProvider)
    return bool(
        stock_provider and type(authorizer) is AllowAllAuthorizer and getattr(provider, "token", "")
    )


def token_matches(authorization: str, token: str) -> bool:
    """True when an `Authorization: token|Bearer T` value carries `token` (constant time)."""
    found = _AUTH.match(authorization)
    if found is None or not token:
        return False
    return hmac.compare_digest(found.group(1).strip().encode(), token.encode())


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
) -> bool:
    """True for the server's token, or for an inference key that may run `model`."""
    if token_matches(authorization, token):
        return True
    key = bearer_key(authorization)
    keys = settings.get("serve_keys")
    return key is not None and keys is not None and bool(keys.allows(key, model))


def model_of(path_args: Sequence[bytes | None]) -> str | None:
    """The model a fast path's percent-decoded path arguments name (the first one); None
    when there is none or it is not UTF-8 (then only the token can admit the request)."""
    name = path_args[0] if path_args else None
    try:
        return name.decode("utf-8") if name is not None else None
    except UnicodeDecodeError:
        return None


HeaderGetter = Callable[[str], "str | None"]


def admits(
    get_header: HeaderGetter, token: str, settings: Mapping[str, Any], model: str | None = None
) -> bool:
    """True when a fast path may answer a request for `model` with these headers (see
    the module docstring; a key scoped to some models needs `model`).

    `get_header(name)` reads a request header (None when absent); an `Origin` counts
    even when empty, and a missing `Host` counts as tornado's default, 127.0.0.1, as
    `HTTPServerRequest.host` has it.
    """
    if get_header("Origin") is not None:
        return False
    if not credentials_allow(get_header("Authorization") or "", token, settings, model):
        return False
    return host_is_local(get_header("Host") or "127.0.0.1", settings)
