"""The lean path for token-authenticated predictions: same auth, a fraction of the cost.

A prediction through jupyter_server's `APIHandler` costs the Jupyter server about
most of its CPU per prediction before the model is even asked (bench/RESULTS.md):
a `RequestHandler` per request, identity and authorizer lookups, XSRF and
cookie logic, default headers, ETag and access-log machinery. A client that
sends `Authorization: token T` (or `Bearer T`) needs none of that: jupyter_server
itself only compares T with the server's token.

So for exactly those requests, a tornado routing rule placed before the
Jupyter routes sends `predictions/...` and `explanations/...` to
`FastPredictions` (the serve lane, `lane.py`, calls it too), which runs the request
through the same `Exchange` as `PredictionRoute` (`exchange.py`: batcher, registry,
streaming, timeouts, metrics) and writes the same answer (status, reason, the
handler's headers and content type, the raw body, `x-request-id`, TorchServe's
error JSON) straight to the connection with `ConnectionWriter`.

Everything else keeps the full route: browsers (cookie + XSRF, or any request
with an `Origin` header, whose origin jupyter_server checks and answers CORS for),
`?token=` URLs, form bodies, OPTIONS, and any server whose auth the fast paths cannot
repeat (a custom identity provider or authorizer, no token at all):
`admission.fast_path_token` decides once, at start (JupyterHub's identity provider is
repeated with the hub's own verdicts, `hub_verdicts.py`). A wrong token does not match
the rule either, so jupyter_server itself refuses it (403).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from datetime import datetime, timezone
from http.client import responses
from typing import Any, TypeVar

from jupyter_server.utils import url_path_join
from tornado import httputil, iostream
from tornado.routing import PathMatches, Rule

from jupyter_serve.server.http.admission import (
    HUB_VERDICTS,
    VERBS,
    Verdict,
    admits,
    hub_token,
    model_of,
)
from jupyter_serve.server.http.exchange import MODEL_PATH, Exchange, Job
from jupyter_serve.server.http.lane_http import header_case, is_form
from jupyter_serve.server.http.requests import new_request_id, to_inference_request
from jupyter_serve.wire.errors import ServeError
from jupyter_serve.wire.logsafe import scrub_uri
from jupyter_serve.wire.protocol import InferenceResult

LOGGER = logging.getLogger(__name__)


class TokenPathMatches(PathMatches):
    """A path rule matching only the requests `admission.admits` (the server's token, an
    inference key for the path's model or a hub token the hub admitted, in an
    `Authorization` header, a local `Host`, no `Origin`, no `token` argument).

    Others (cookies, `?token=`, no credentials, a wrong token, a remote `Host`, a
    browser's request, a form body, which may hold a `token` field) fall through to the
    full routes, where jupyter_server authenticates, checks and answers or refuses them.
    A hub token with no verdict yet takes the full route too, while the hub is asked
    about it for the requests that follow.
    """

    def __init__(self, path_pattern: str, token: Callable[[], str], settings: Any) -> None:
        super().__init__(path_pattern)
        self.token = token
        self.settings = settings

    def match(self, request: httputil.HTTPServerRequest) -> dict[str, Any] | None:
        if request.method not in VERBS or is_form(request.headers.get("Content-Type", "")):
            return None
        matched = super().match(request)
        if matched is None:
            return None
        model = model_of(matched.get("path_args") or [])
        verdict = admits(request.headers.get, self.token(), self.settings, model, request.query)
        if verdict is Verdict.ASK_HUB:
            self.settings[HUB_VERDICTS].learn(hub_token(request.headers.get("Authorization", "")))
        return matched if verdict else None


class FastPredictions:
    """Serves matched requests; the rule's target (tornado calls it with the request).

    No task per request: the exchange checks and queues the request at once and
    writes the answer from the result future's done-callback.
    """

    def __init__(
        self, settings: dict[str, Any], explain: bool, writer: type[ConnectionWriter] | None = None
    ) -> None:
        self.settings = settings
        self.explain = explain
        self.writer = writer or ConnectionWriter

    def __call__(
        self, request: httputil.HTTPServerRequest, path_args: list[bytes | None], **_: Any
    ) -> None:
        self.settings["api_last_activity"] = datetime.now(timezone.utc)
        request_id = new_request_id()
        exchange = Exchange(self.writer(request, request_id), self.settings, request_id)
        connection: Any = request.connection
        connection.set_close_callback(exchange.client_gone)

        def prepare() -> Job:
            name, version, extra = (_text(arg) for arg in (*path_args, None, None, None)[:3])
            inference = to_inference_request(
                request, request_id, explain=self.explain, url_path=extra
            )
            return Job(name or "", version, inference)

        exchange.start(request, prepare)


class ConnectionWriter:
    """An exchange's `Writer` straight to an `HTTPConnection` (tornado's `HTTP1Connection`
    or the lane's `LaneProtocol`), with the bytes `PredictionRoute` sends: the status and
    reason, the handler's content type and headers, `x-request-id`, the raw body.

    A whole answer's header fields are gathered in a `fields()` mapping and sent by
    `send`; a subclass for another transport changes those two (`lane.LaneWriter`)."""

    __slots__ = ("connection", "request", "request_id", "sent")

    fields: Callable[[], MutableMapping[str, Any]] = httputil.HTTPHeaders

    def __init__(self, request: httputil.HTTPServerRequest, request_id: str) -> None:
        self.request = request
        self.connection: Any = request.connection
        self.request_id = request_id
        self.sent = False  # a head went out (or failed half-way): no other answer can follow

    def answer(self, result: InferenceResult) -> None:
        headers = result_headers(result, self.fields())
        self.write(result.status, result.reason, headers, bytes(result.body))

    def error(self, error: ServeError) -> None:
        if self.sent:  # an answer broke half-way: cut it off
            self.connection.close()
            return
        headers = self.fields()
        headers["Content-Type"] = "application/json"
        self.write(error.status_code, "", headers, error.body())

    def begin(self, result: InferenceResult) -> None:
        stream = getattr(self.connection, "stream", None)
        headers = result_headers(result, httputil.HTTPHeaders())
        headers["X-Request-Id"] = self.request_id
        self.sent = True
        try:
            if stream is not None:
                stream.set_nodelay(True)  # each chunk leaves at once (no Nagle)
            self.connection.write_headers(self.start_line(result.status, result.reason),
                                          headers, bytes(result.body) or None)  # fmt: skip
        except iostream.StreamClosedError:
            return

    def chunk(self, body: bytes) -> None:
        try:
            self.connection.write(body)
        except iostream.StreamClosedError:
            return

    def end(self, body: bytes) -> None:
        self.connection.set_close_callback(None)
        try:
            if body:
                self.connection.write(body)
            self.connection.finish()
        except iostream.StreamClosedError:
            return

    def cut(self, status: int) -> None:
        self.connection.close()  # no terminating chunk: the client sees a truncated answer

    def start_line(self, status: int, reason: str) -> httputil.ResponseStartLine:
        reason = reason or responses.get(status, "Unknown")
        return httputil.ResponseStartLine(self.request.version, status, reason)

    def write(
        self, status: int, reason: str, headers: MutableMapping[str, Any], body: bytes
    ) -> None:
        """A whole answer, with its Content-Length."""
        self.connection.set_close_callback(None)
        headers["X-Request-Id"] = self.request_id
        headers["Content-Length"] = str(len(body))
        self.sent = True
        try:
            self.send(status, reason or responses.get(status, "Unknown"), headers, body)
        except iostream.StreamClosedError:
            return  # the client left; nothing to answer
        if status >= 400:
            LOGGER.info("%s %s %s", status, self.request.method, scrub_uri(self.request.uri))

    def send(self, status: int, reason: str, headers: Any, body: bytes) -> None:
        """The transport's step: the head and body out, then the answer's end."""
        self.connection.write_headers(self.start_line(status, reason), headers, body)
        self.connection.finish()


Fields = TypeVar("Fields", bound=MutableMapping[str, Any])


def result_headers(result: InferenceResult, headers: Fields) -> Fields:
    """`headers` with a result's content type and its handler's headers, names in tornado's
    `Http-Header-Case` (a later value of a name replaces the earlier in its place)."""
    if result.content_type:
        headers["Content-Type"] = result.content_type
    for key, value in result.headers.items():
        headers[header_case(key)] = value
    return headers


def _text(arg: bytes | None) -> str | None:
    """A path argument as `RequestHandler.decode_argument` gives it (400 if not UTF-8)."""
    if arg is None:
        return None
    try:
        return arg.decode("utf-8")
    except UnicodeDecodeError:
        raise ServeError(f"Invalid unicode in url: {arg[:40]!r}", status_code=400) from None


def fast_targets(
    settings: dict[str, Any], writer: type[ConnectionWriter] | None = None
) -> dict[str, FastPredictions]:
    """The lean path's answer for each route kind (shared by its rules and the lane, which
    gives its own `writer`)."""
    return {kind: FastPredictions(settings, explain=kind == "explanations", writer=writer)
            for kind in ("predictions", "explanations")}  # fmt: skip


def fast_rules(
    path_prefix: str, token: Callable[[], str] | None, settings: dict[str, Any]
) -> list[Rule]:
    """The rules to put before the Jupyter routes (none without a `token` getter:
    `admission.fast_path_token`)."""
    if token is None:
        return []
    rules = []
    for kind, target in fast_targets(settings).items():
        pattern = url_path_join(path_prefix, kind) + MODEL_PATH
        rules.append(Rule(TokenPathMatches(pattern, token, settings), target))
    return rules
