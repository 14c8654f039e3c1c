"""`ServeRoute`: the base of every REST route: Jupyter auth and TorchServe's error JSON.

Every route is a jupyter_server `APIHandler` with `auth_resource = "serve"`, so
the token (header, Bearer, `?token=`) or a cookie with XSRF is required. Any
`ServeError` a route raises becomes TorchServe's body
`{"code": ..., "type": ..., "message": ...}` with its status; tornado's own
errors (a wrong verb, a malformed request) are mapped the same way.

Every response, errors included, carries TorchServe's `x-request-id` header:
`set_default_headers` runs again whenever tornado clears the response for an
error, so the id survives `send_error`.
"""

from __future__ import annotations

import json
import logging
from types import TracebackType
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web

from ..errors import MethodNotAllowed, ResourceNotFound, ServeError
from ..metrics import ServeMetrics
from ..registry import ModelRegistry
from .requests import new_request_id

NOT_FOUND_MESSAGE = "Requested resource is not found, please refer to API document."
_NOT_ALLOWED = "Requested method is not allowed, please refer to API document."


class ServeRoute(ExtensionHandlerMixin, APIHandler):
    """Base class of jupyter_serve's routes."""

    auth_resource = "serve"
    _request_id: str | None = None

    @property
    def request_id(self) -> str:
        """This request's id (a UUID4), sent back as `x-request-id`."""
        if self._request_id is None:
            self._request_id = new_request_id()
        return self._request_id

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("x-request-id", self.request_id)

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
        """A `ServeError` is an answer (TorchServe's error JSON), not a crash: it is logged
        in one line, a warning for 4xx and an error for 5xx, with no traceback."""
        if not isinstance(value, ServeError):
            super().log_exception(typ, value, tb)
            return
        level = logging.WARNING if value.status_code < 500 else logging.ERROR
        self.log.log(level, "%d %s %s: %s", value.status_code, self.request.method,
                     self.request.uri, value.message)  # fmt: skip

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        error = exc_info[1] if exc_info else None
        if not isinstance(error, ServeError):
            error = _from_status(status_code, error)
        self.set_status(error.status_code)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(error.to_json(), indent=2) + "\n")


def _from_status(status_code: int, error: BaseException | None) -> ServeError:
    if status_code == 404:
        return ResourceNotFound(NOT_FOUND_MESSAGE)
    if status_code == 405:
        return MethodNotAllowed(_NOT_ALLOWED)
    message = error.log_message if isinstance(error, web.HTTPError) else None
    return ServeError(message or "Internal server error", status_code=status_code)
