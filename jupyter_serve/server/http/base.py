"""`ServeRoute`: the base of every REST route: Jupyter auth and TorchServe's error JSON.

Every route is a jupyter_server `APIHandler` with `auth_resource = "serve"`, so
the token (header, Bearer, `?token=`) or a cookie with XSRF is required. Any
`ServeError` a route raises becomes TorchServe's body
`{"code": ..., "type": ..., "message": ...}` with its status; tornado's own
errors (a wrong verb, a malformed request) are mapped the same way. A 405 also
carries an `Allow` header naming the methods the route answers (TRACE never).

Every response, errors included, carries TorchServe's `x-request-id` header and its
no-cache headers (`NO_CACHE_HEADERS`; no `ETag`, so never a 304): `set_default_headers`
runs again whenever tornado clears the response for an error, so they survive
`send_error`.

Inference keys (`jupyter_serve.server.keys`, the store in `settings["serve_keys"]`): a
route's `identity_provider` and `authorizer` are the server's own, wrapped. A request
whose `Authorization: Bearer K` (or `token K`) header carries a valid key is a
`KeyUser`, header-authenticated as with the token (no XSRF, no origin check, no
login cookie); our authorizer lets a `KeyUser` do only `execute` on `serve` for a
model in its scope (`ServeRoute.requested_model`), and refuses it everything else.
The route remembers the key user (`ServeRoute.key_user`) and skips the XSRF check
for it in its own `check_xsrf_cookie`, so a key needs no XSRF token whichever check
the server runs: jupyter_server's (which asks `is_token_authenticated`) or one a
server extension installs on jupyter_server's handler classes, as JupyterHub's
single-user server does (it leaves a subclass's own override in place).
Every other request, cookie users included, gets the server's own check.

A GET that runs a model or downloads an archive, authenticated by the login cookie
alone, also needs the XSRF token and a same-origin fetch (`check_cookie_get`).
Every other request (a wrong or revoked key included: it is then just a wrong
token) goes to the server's identity provider and authorizer unchanged. Other
Jupyter routes (kernels, contents, terminals) never see the wrappers, so a key is
a wrong token there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from http.client import responses
from types import TracebackType
from typing import Any

from jupyter_server.auth.identity import User
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web
from tornado.httputil import HTTPServerRequest

from jupyter_serve.server.http.access import EXECUTE, RESOURCE
from jupyter_serve.server.http.requests import NO_CACHE_HEADERS, new_request_id
from jupyter_serve.server.keys import KeyInfo, KeyStore, bearer_key
from jupyter_serve.server.metrics.serve_metrics import ServeMetrics
from jupyter_serve.server.registry import ModelRegistry
from jupyter_serve.wire.errors import (
    DEFAULT_MAX_REQUEST_SIZE,
    BadRequest,
    Forbidden,
    MethodNotAllowed,
    RequestTooLarge,
    ResourceNotFound,
    ServeError,
)
from jupyter_serve.wire.logsafe import printable, scrub_uri

NOT_FOUND_MESSAGE = "Requested resource is not found, please refer to API document."
_NOT_ALLOWED = "Requested method is not allowed, please refer to API document."


@dataclass
class KeyUser(User):
    """A request authenticated with an inference key: it may only run models."""

    key: KeyInfo | None = None

    def may_run(self, model: str | None) -> bool:
        return self.key is not None and self.key.may_run(model)


def _is_key_user(handler: Any) -> bool:
    return isinstance(handler.current_user, KeyUser)


class KeyIdentity:
    """The server's identity provider, which also knows inference keys in the header."""

    def __init__(self, provider: Any, keys: KeyStore) -> None:
        self.provider = provider
        self.keys = keys

    def get_user(self, handler: Any) -> Any:
        """A `KeyUser` for a valid key; anything else is the server's decision."""
        key = bearer_key(handler.request.headers.get("Authorization", ""))
        info = self.keys.lookup(key) if key is not None else None
        if info is None:
            return self.provider.get_user(handler)
        user = KeyUser(f"key-{info.key_id}", name=info.name or f"key {info.key_id}", key=info)
        handler.key_user = user
        return user

    def is_token_authenticated(self, handler: Any) -> bool:
        """A key came in a header, as a token does: no XSRF check is needed."""
        return _is_key_user(handler) or bool(self.provider.is_token_authenticated(handler))

    def should_check_origin(self, handler: Any) -> bool:
        return not _is_key_user(handler) and bool(self.provider.should_check_origin(handler))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.provider, name)


class KeyAuthorizer:
    """The server's authorizer, except for a `KeyUser`: `execute` on `serve` in its scope."""

    def __init__(self, authorizer: Any) -> None:
        self.authorizer = authorizer

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> Any:
        if isinstance(user, KeyUser):
            allowed = action == EXECUTE and resource == RESOURCE
            return allowed and user.may_run(handler.requested_model())
        return self.authorizer.is_authorized(handler, user, action, resource)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.authorizer, name)


def request_size_error(
    request: HTTPServerRequest, settings: Mapping[str, Any]
) -> RequestTooLarge | None:
    """The 413 for a body (or announced length) over the app's `max_request_size`, else None."""
    app = settings.get("serve_app")
    limit = int(getattr(app, "max_request_size", DEFAULT_MAX_REQUEST_SIZE))
    announced = request.headers.get("Content-Length", "")
    size = int(announced) if announced.isdigit() else 0
    if max(size, len(request.body or b"")) > limit:
        return RequestTooLarge.over(limit)
    return None


class ServeRoute(ExtensionHandlerMixin, APIHandler):
    """Base class of jupyter_serve's routes."""

    auth_resource = "serve"
    _request_id: str | None = None
    key_user: KeyUser | None = None
    """The inference key this request came with (`KeyIdentity.get_user` sets it once the
    `Authorization` header carried a valid key); None for every other request."""
    guards_cookie_gets = False
    """Whether a GET or HEAD made with the login cookie needs the XSRF token and must not
    come from another site (`check_cookie_get`): set by the routes that run a model or
    hand out its archive, which a cross-site link must never reach."""

    @property
    def request_id(self) -> str:
        """This request's id (a UUID4), sent back as `x-request-id`."""
        if self._request_id is None:
            self._request_id = new_request_id()
        return self._request_id

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("x-request-id", self.request_id)
        for name, value in NO_CACHE_HEADERS.items():
            self.set_header(name, value)

    def compute_etag(self) -> None:
        """No `ETag`, so never a 304: TorchServe's answers are not to be cached."""

    async def prepare(self) -> None:  # type: ignore[override]
        """jupyter_server's checks first (host, auth, XSRF, origin), then 413 for a body over
        `max_request_size` on every route, as TorchServe's frontend refuses it."""
        await super().prepare()
        too_large = self.body_size_error()
        if too_large is not None:
            raise too_large
        if self.guards_cookie_gets:
            self.check_cookie_get()

    def check_xsrf_cookie(self) -> None:
        """No XSRF check for a valid inference key (it came in the `Authorization`
        header, as a token does); every other request gets the server's own check, which
        may be jupyter_server's or one a server extension patched into it (JupyterHub's
        single-user server does: its check exempts only hub tokens, and leaves a
        subclass's override in place)."""
        if self.key_user is not None:
            return
        super().check_xsrf_cookie()

    def check_cookie_get(self) -> None:
        """403 for a GET or HEAD authenticated by the login cookie (no token, no key) that
        a browser marks as coming from another site (`Sec-Fetch-Site`) or that carries no
        XSRF token, which jupyter_server asks only of other verbs: a top-level link from
        another site then cannot run a model with the user's cookie. The token is checked
        by jupyter_server's own `check_xsrf_cookie`."""
        if self.request.method not in ("GET", "HEAD") or self.current_user is None:
            return
        if self.token_authenticated:
            return
        site = self.request.headers.get("Sec-Fetch-Site", "same-origin").strip().lower()
        if site not in ("same-origin", "none"):
            raise web.HTTPError(403, "Blocking a cross-site request made with the login cookie.")
        if self.settings.get("disable_check_xsrf", False):
            return
        sent = (
            self.get_query_argument("_xsrf", None)
            or self.request.headers.get("X-Xsrftoken")
            or self.request.headers.get("X-Csrftoken")
        )
        if not sent:
            raise web.HTTPError(403, "'_xsrf' argument missing from GET")
        self.check_xsrf_cookie()

    def body_size_error(self) -> ServeError | None:
        """The 413 for this request's body, checked by `prepare`: over `max_request_size`.
        A route taking larger bodies overrides it with its own limit (server/http/store.py)."""
        return request_size_error(self.request, self.settings)

    @property
    def identity_provider(self) -> Any:
        """The server's identity provider, knowing inference keys too (module docstring)."""
        provider = super().identity_provider
        keys: KeyStore | None = self.settings.get("serve_keys")
        return provider if keys is None else KeyIdentity(provider, keys)

    @property
    def authorizer(self) -> Any:
        """The server's authorizer; ours for a request authenticated with a key."""
        return KeyAuthorizer(super().authorizer)

    def requested_model(self) -> str | None:
        """The model this request runs, for a key's scope: the first path argument
        (`predictions/{m}`, `v2/models/{m}/infer`, `models/{m}/invoke`, `{m}/predict`),
        else the `model_name` query argument (`invocations`)."""
        if self.path_args and self.path_args[0]:
            return str(self.path_args[0])
        name = self.get_query_argument("model_name", "")
        return name or None

    @property
    def registry(self) -> ModelRegistry:
        registry: ModelRegistry = self.settings["serve_registry"]
        return registry

    @property
    def metrics(self) -> ServeMetrics:
        metrics: ServeMetrics = self.settings["serve_metrics"]
        return metrics

    async def options(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """A CORS preflight goes to jupyter_server; a plain OPTIONS gets the route's
        OpenAPI document, as TorchServe answers OPTIONS (`options_document`, authorized
        like every verb, so it is awaited)."""
        document = getattr(self, "options_document", None)
        if document is None or self.request.headers.get("Access-Control-Request-Method"):
            super().options(*args, **kwargs)
        else:
            await document(*args)

    def write_json(self, data: Any, status: int = 200) -> None:
        """Finish with TorchServe's pretty-printed JSON (indent 2, trailing newline)."""
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data, indent=2) + "\n")

    def log_exception(
        self,
        typ: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """One line per refused or failed request, with the uri scrubbed and names escaped
        (`logsafe.py`). A `ServeError` is an answer (TorchServe's error JSON), not a crash:
        a warning for 4xx and an error for 5xx, with no traceback; tornado's `HTTPError`s
        are warnings, as tornado logs them; anything else is an uncaught exception."""
        summary = f"{self.request.method} {scrub_uri(self.request.uri or '')}"
        if isinstance(value, ServeError):
            level = logging.WARNING if value.status_code < 500 else logging.ERROR
            self.log.log(level, "%d %s: %s", value.status_code, summary, printable(value.message))
        elif isinstance(value, web.HTTPError):
            if value.log_message:
                self.log.warning("%d %s: %s", value.status_code, summary,
                                 printable(_http_error_text(value)))  # fmt: skip
        else:
            self.log.error("Uncaught exception %s", summary, exc_info=value)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        error = exc_info[1] if exc_info else None
        if not isinstance(error, ServeError):
            error = _from_status(status_code, error)
        self.set_status(error.status_code)
        self.set_header("Content-Type", "application/json")
        if error.status_code == 405:  # RFC 9110: a 405 says which methods the resource has
            self.set_header("Allow", ", ".join(self.allowed_methods()))
        self.finish(self.error_body(error))

    def error_body(self, error: ServeError) -> bytes:
        """The body of an error answer: TorchServe's error JSON (the OpenAI routes write
        OpenAI's)."""
        return error.body()

    def allowed_methods(self) -> list[str]:
        """The methods this route answers (OPTIONS always), but the one just refused."""
        refused = self.request.method
        return [
            method
            for method in self.SUPPORTED_METHODS
            if method != refused
            and (method == "OPTIONS" or _implements(type(self), method.lower()))
        ]


def _implements(route: type, verb: str) -> bool:
    """Whether `route` defines `verb` itself (tornado's default answers 405)."""
    return getattr(route, verb, None) is not getattr(web.RequestHandler, verb)


def _http_error_text(error: web.HTTPError) -> str:
    """A tornado `HTTPError`'s log message with its arguments, as tornado formats it."""
    message = str(error.log_message)
    try:
        return message % error.args if error.args else message
    except (TypeError, ValueError):
        return message


def _from_status(status_code: int, error: BaseException | None) -> ServeError:
    if status_code == 404:
        return ResourceNotFound(NOT_FOUND_MESSAGE)
    if status_code == 405:
        return MethodNotAllowed(_NOT_ALLOWED)
    message = error.log_message if isinstance(error, web.HTTPError) else None
    if status_code == 403:
        return Forbidden(message or "Forbidden")
    if status_code == 400:  # tornado's own: an undecodable path or form, a bad header...
        return BadRequest(message or "Bad Request")
    if message is None and 400 <= status_code < 500:
        message = responses.get(status_code, "Bad Request")  # a client's mistake, not ours
    return ServeError(message or "Internal server error", status_code=status_code)
