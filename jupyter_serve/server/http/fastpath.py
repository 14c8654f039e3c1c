"""The fast path's side of a prediction: `FastPredictions`, what the serve lane (`lane.py`)
calls for a request it may answer, and `LaneWriter`, which writes the answer.

A prediction through jupyter_server's `APIHandler` costs the Jupyter server most of its
CPU per prediction before the model is even asked (bench/RESULTS.md): a `RequestHandler`
per request, identity and authorizer lookups, XSRF and cookie logic, default headers,
ETag and access-log machinery, and tornado's HTTP/1.1 layer under it. For a request the
full route would surely admit (`admission.py`), the lane skips all of that:
`FastPredictions` runs it through the same `Exchange` as `PredictionRoute`
(`exchange.py`: size, batcher, registry, streaming, timeouts, metrics), and `LaneWriter`
writes the same answer (status, reason, the handler's headers and content type, the raw
body, `x-request-id`, TorchServe's error JSON) to the lane's connection, whose one head
formatter (`LaneProtocol.send_head`) refuses CR or LF in any header.

This is the one fast transport: every other request, and every request on a connection
the lane has handed to tornado, takes jupyter_server's full route.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from datetime import datetime, timezone
from http.client import responses
from typing import Any

from tornado import iostream

from jupyter_serve.server.http.exchange import Exchange, Job
from jupyter_serve.server.http.lane_http import LaneRequest, header_case
from jupyter_serve.server.http.requests import (
    NO_CACHE_HEADERS,
    new_request_id,
    to_inference_request,
)
from jupyter_serve.wire.errors import ServeError
from jupyter_serve.wire.logsafe import scrub_uri
from jupyter_serve.wire.protocol import InferenceResult

LOGGER = logging.getLogger(__name__)


class FastPredictions:
    """Answers one kind of route (`predictions` or `explanations`) for the lane.

    No task per request: the exchange checks and queues the request at once and
    writes the answer from the result future's done-callback.
    """

    def __init__(self, settings: dict[str, Any], explain: bool) -> None:
        self.settings = settings
        self.explain = explain

    def __call__(self, request: Any, path_args: list[str | None]) -> None:
        """Serve `request` (a `LaneRequest`: what the exchange reads of tornado's
        `HTTPServerRequest`); `path_args` are the model, version and extra path, decoded."""
        self.settings["api_last_activity"] = datetime.now(timezone.utc)
        request_id = new_request_id()
        exchange = Exchange(LaneWriter(request, request_id), self.settings, request_id)
        request.connection.set_close_callback(exchange.client_gone)
        name, version, extra = (*path_args, None, None, None)[:3]

        def prepare() -> Job:
            inference = to_inference_request(
                request, request_id, explain=self.explain, url_path=extra
            )
            return Job(name or "", version, inference)

        exchange.start(request, prepare)


class LaneWriter:
    """An exchange's `Writer` to the lane's connection (`lane_connection.LaneProtocol`),
    with the bytes `PredictionRoute` sends: the status and reason, the handler's content
    type and headers, `x-request-id`, the raw body; whole or streamed in chunks."""

    __slots__ = ("connection", "request", "request_id", "sent")

    def __init__(self, request: LaneRequest, request_id: str) -> None:
        self.request = request
        self.connection: Any = request.connection
        self.request_id = request_id
        self.sent = False  # a head went out (or failed half-way): no other answer can follow

    def answer(self, result: InferenceResult) -> None:
        headers = result_headers(result)
        self.write(result.status, result.reason, headers, bytes(result.body))

    def error(self, error: ServeError) -> None:
        if self.sent:  # an answer broke half-way: cut it off
            self.connection.close()
            return
        self.write(error.status_code, "", {"Content-Type": "application/json"}, error.body())

    def begin(self, result: InferenceResult) -> None:
        headers = result_headers(result)
        headers["X-Request-Id"] = self.request_id
        headers.update(NO_CACHE_HEADERS)
        self.sent = True
        try:  # asyncio's TCP transports send each chunk at once (TCP_NODELAY)
            self.connection.send_head(result.status, reason_of(result.status, result.reason),
                                      headers, bytes(result.body), whole=False)  # fmt: skip
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

    def write(
        self, status: int, reason: str, headers: MutableMapping[str, Any], body: bytes
    ) -> None:
        """A whole answer, with its Content-Length."""
        self.connection.set_close_callback(None)
        headers["X-Request-Id"] = self.request_id
        headers.update(NO_CACHE_HEADERS)
        headers["Content-Length"] = str(len(body))
        self.sent = True
        try:
            self.connection.send_head(status, reason_of(status, reason), headers, body,
                                      whole=True)  # fmt: skip
        except iostream.StreamClosedError:
            return  # the client left; nothing to answer
        if status >= 400:
            LOGGER.info("%s %s %s", status, self.request.method, scrub_uri(self.request.uri))


def reason_of(status: int, reason: str) -> str:
    """The reason phrase: the handler's own, else the standard one for `status`."""
    return reason or responses.get(status, "Unknown")


def result_headers(result: InferenceResult) -> dict[str, Any]:
    """A result's content type and its handler's headers, names in tornado's
    `Http-Header-Case` (a later value of a name replaces the earlier in its place)."""
    headers: dict[str, Any] = {}
    if result.content_type:
        headers["Content-Type"] = result.content_type
    for key, value in result.headers.items():
        headers[header_case(key)] = value
    return headers


def fast_targets(settings: dict[str, Any]) -> dict[str, FastPredictions]:
    """The lane's answer for each route kind."""
    return {kind: FastPredictions(settings, explain=kind == "explanations")
            for kind in ("predictions", "explanations")}  # fmt: skip
