"""The lean path for token-authenticated predictions: same auth, a fraction of the cost.

A prediction through jupyter_server's `APIHandler` costs the Jupyter server about
0.4 ms of CPU before the model is even asked (tech-notes.md, bench/RESULTS.md):
a `RequestHandler` per request, identity and authorizer lookups, XSRF and
cookie logic, default headers, ETag and access-log machinery. A client that
sends `Authorization: token T` (or `Bearer T`) needs none of that: jupyter_server
itself only compares T with the server's token.

So for exactly those requests, a tornado routing rule placed before the
Jupyter routes sends `predictions/...` and `explanations/...` to
`FastPredictions`, which compares the token in constant time, runs the request
through the same batcher, registry and metrics as `PredictionRoute`, and writes
the same answer (status, reason, the handler's headers and content type, the
raw body, `x-request-id`, TorchServe's error JSON) straight to the connection.

Everything else keeps the full route: browsers (cookie + XSRF, or any request
with an `Origin` header, whose origin jupyter_server checks and answers CORS for),
`?token=` URLs, OPTIONS, and any server whose identity provider or authorizer is
not jupyter_server's stock token check (JupyterHub, custom authorizers), or that
has no token at all: `fast_path_applies` decides once, at start. A wrong token
does not match the rule either, so jupyter_server itself refuses it (403).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import datetime, timezone
from http.client import responses
from typing import Any

from jupyter_server.utils import url_path_join
from tornado import httputil, iostream
from tornado.routing import PathMatches, Rule

from ..errors import ServeError
from ..protocol import InferenceResult
from .admission import VERBS, admits, fast_path_applies
from .inference import (
    check_has_workers,
    request_size_error,
)
from .requests import new_request_id, to_inference_request

LOGGER = logging.getLogger(__name__)
_PATH = r"/([^/]+)(?:/([^/]+)(?:/(.+))?)?/?$"


class TokenPathMatches(PathMatches):
    """A path rule matching only the requests `admission.admits` (the server's token in
    an `Authorization` header, a local `Host`, no `Origin`).

    Others (cookies, `?token=`, no credentials, a wrong token, a remote `Host`, a
    browser's request) fall through to the full routes, where jupyter_server
    authenticates, checks and answers or refuses them.
    """

    def __init__(self, path_pattern: str, identity_provider: Any, settings: Any) -> None:
        super().__init__(path_pattern)
        self.identity_provider = identity_provider
        self.settings = settings

    def match(self, request: httputil.HTTPServerRequest) -> dict[str, Any] | None:
        if request.method not in VERBS:
            return None
        token = str(self.identity_provider.token or "")
        if not admits(request.headers.get, token, self.settings):
            return None
        return super().match(request)


class FastPredictions:
    """Serves matched requests; the rule's target (tornado calls it with the request)."""

    def __init__(self, settings: dict[str, Any], explain: bool) -> None:
        self.settings = settings
        self.explain = explain

    def __call__(
        self, request: httputil.HTTPServerRequest, path_args: list[bytes | None], **_: Any
    ) -> None:
        name, version, extra = (_text(arg) for arg in (*path_args, None, None, None)[:3])
        _Exchange(self, request).start(name or "", version, extra)


class _Exchange:
    """One request and its answer, written to the connection without a RequestHandler.

    No task per request: `start` checks and queues the request synchronously and
    the answer is written from the result future's done-callback (one event-loop
    hop fewer than awaiting it). A streaming handler's intermediate results go out
    as HTTP chunks as they arrive (the first with the status and headers, no
    Content-Length), the final result as the last chunk, as `PredictionRoute` does.
    """

    def __init__(self, path: FastPredictions, request: httputil.HTTPServerRequest) -> None:
        self.path = path
        self.request = request
        self.connection: Any = request.connection
        self.request_id = new_request_id()
        self.pending: asyncio.Future[InferenceResult] | None = None
        self.streaming = False  # the headers left with a first chunk
        self.gone = False  # the client closed the connection
        self.timed_out = False  # clientTimeoutInMills passed first
        self.timer: asyncio.TimerHandle | None = None
        self.labels: tuple[str, str | None, str] | None = None  # name, version asked, served
        self.started = 0.0

    def start(self, name: str, version: str | None = None, extra: str | None = None) -> None:
        self.path.settings["api_last_activity"] = datetime.now(timezone.utc)
        self.started = time.perf_counter()
        try:
            future, timeout_ms = self.submit(name, version, extra)
        except ServeError as error:
            self.answer_error(error)
            return
        except Exception:  # a bug must not leave the client waiting: 500, as the route would
            LOGGER.exception("Prediction %s failed", self.request_id)
            self.answer_error(ServeError("Internal server error"))
            return
        self.pending = future
        self.connection.set_close_callback(self._client_gone)
        if timeout_ms > 0:
            loop = asyncio.get_running_loop()
            self.timer = loop.call_later(timeout_ms / 1000, self._client_timeout)
        future.add_done_callback(self._answer)

    def submit(
        self, name: str, version: str | None, extra: str | None
    ) -> tuple[asyncio.Future[InferenceResult], int]:
        """Queue the request as `PredictionRoute` does: 413, 404, 503, then the batcher."""
        too_large = request_size_error(self.request, self.path.settings)
        if too_large is not None:
            raise too_large
        model = self.path.settings["serve_registry"].get(name, version)
        self.labels = (name, version, model.version)
        check_has_workers(model, name, version)
        request = to_inference_request(
            self.request, self.request_id, explain=self.path.explain, url_path=extra
        )
        deadline = asyncio.get_running_loop().time() + model.spec.response_timeout
        future = model.batcher.submit(request, deadline, on_chunk=self.send_chunk)
        return future, model.spec.client_timeout_ms

    def _answer(self, future: asyncio.Future[InferenceResult]) -> None:
        """The result future is done: answer with it (or, cancelled, with nothing)."""
        try:
            self._answer_with(future)
        except Exception:  # a bug while writing: no half-written answer stays open
            LOGGER.exception("Answering prediction %s failed", self.request_id)
            self.connection.close()

    def _answer_with(self, future: asyncio.Future[InferenceResult]) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if future.cancelled():
            if self.timed_out:
                self.drop_answer()
            return  # else the client left
        error = future.exception()
        if error is None:
            result = future.result()
            self.send_result(result)
            self.record(result.status, result.queue_ms)
        elif isinstance(error, ServeError):
            self.answer_error(error)
        else:
            LOGGER.error("Prediction %s failed", self.request_id, exc_info=error)
            self.answer_error(ServeError("Internal server error"))

    def answer_error(self, error: ServeError) -> None:
        self.send_error(error)
        self.record(error.status_code, 0.0)

    def record(self, status: int, queue_ms: float) -> None:
        """Count an answered request, as the route's on_finish (a client gone is not)."""
        if self.labels is None:
            return
        name, version, served = self.labels
        latency_us = (time.perf_counter() - self.started) * 1e6
        metrics = self.path.settings["serve_metrics"]
        metrics.record_request(
            name, version, status, latency_us, queue_ms * 1000, served_version=served
        )

    def _client_timeout(self) -> None:
        """`clientTimeoutInMills` passed: drop the request (queued or running)."""
        self.timed_out = True
        if self.pending is not None:
            self.pending.cancel()

    def _client_gone(self) -> None:
        """The client went away: drop its queued request (the batcher skips it)."""
        self.gone = True
        if self.pending is not None:
            self.pending.cancel()

    def send_chunk(self, result: InferenceResult) -> None:
        """One intermediate result as one HTTP chunk (the first with the headers)."""
        if self.gone:
            return
        body = bytes(result.body)
        try:
            if self.streaming:
                self.connection.write(body)
                return
            self.streaming = True
            stream = getattr(self.connection, "stream", None)
            if stream is not None:
                stream.set_nodelay(True)  # each chunk leaves at once (no Nagle)
            self.connection.write_headers(self.start_line(result.status, result.reason),
                                          self.result_headers(result), body or None)  # fmt: skip
        except iostream.StreamClosedError:
            self.gone = True

    def drop_answer(self) -> None:
        """Send nothing, as TorchServe past `clientTimeoutInMills`: the client gives up."""
        LOGGER.warning("Drop response for inference request %s due to client timeout",
                       self.request_id)  # fmt: skip
        if self.streaming:
            self.connection.close()

    def send_result(self, result: InferenceResult) -> None:
        if self.streaming:
            self.finish_stream(bytes(result.body))
            return
        self.write(result.status, result.reason, self.result_headers(result), bytes(result.body))

    def send_error(self, error: ServeError) -> None:
        if not self.streaming:
            self.send_json(error.status_code, error.to_json())
            return
        LOGGER.warning("Streamed answer %s failed (%d): %s",
                       self.request_id, error.status_code, error.message)  # fmt: skip
        self.connection.close()  # no terminating chunk: the client sees a truncated answer

    def send_json(self, status: int, body: dict[str, Any]) -> None:
        headers = httputil.HTTPHeaders({"Content-Type": "application/json"})
        self.write(status, "", headers, (json.dumps(body, indent=2) + "\n").encode())

    def result_headers(self, result: InferenceResult) -> httputil.HTTPHeaders:
        headers = httputil.HTTPHeaders()
        if result.content_type:
            headers["Content-Type"] = result.content_type
        for key, value in result.headers.items():
            headers[key] = value
        headers["x-request-id"] = self.request_id
        return headers

    def start_line(self, status: int, reason: str) -> httputil.ResponseStartLine:
        reason = reason or responses.get(status, "Unknown")
        return httputil.ResponseStartLine(self.request.version, status, reason)

    def finish_stream(self, last: bytes) -> None:
        self.connection.set_close_callback(None)
        try:
            if last:
                self.connection.write(last)
            self.connection.finish()
        except iostream.StreamClosedError:
            return

    def write(self, status: int, reason: str, headers: httputil.HTTPHeaders, body: bytes) -> None:
        self.connection.set_close_callback(None)
        headers["x-request-id"] = self.request_id
        headers["Content-Length"] = str(len(body))
        try:
            self.connection.write_headers(self.start_line(status, reason), headers, body)
            self.connection.finish()
        except iostream.StreamClosedError:
            return  # the client left; nothing to answer
        if status >= 400:
            LOGGER.info("%s %s %s", status, self.request.method, self.request.uri)


def _text(arg: bytes | None) -> str | None:
    return None if arg is None else arg.decode("utf-8")


def fast_targets(settings: dict[str, Any]) -> dict[str, FastPredictions]:
    """The lean path's answer for each route kind (shared by its rules and the lane)."""
    return {kind: FastPredictions(settings, explain=kind == "explanations")
            for kind in ("predictions", "explanations")}  # fmt: skip


def fast_rules(base_url: str, prefix: str, serverapp: Any, settings: dict[str, Any]) -> list[Rule]:
    """The rules to put before the Jupyter routes (none when `fast_path_applies` is False)."""
    if not fast_path_applies(serverapp):
        return []
    provider = serverapp.identity_provider
    return [
        Rule(
            TokenPathMatches(url_path_join(base_url, prefix, kind) + _PATH, provider, settings),
            target,
        )
        for kind, target in fast_targets(settings).items()
    ]
