"""Inference routes: `ping`, predictions and explanations (TorchServe's inference API).

`InferenceRoute` is the shared core (the KServe routes build on it too): it
checks `max_request_size` (413), finds the model version (404), refuses a model
without workers (503 with TorchServe's message), submits requests to the
model's batcher with `deadline = now + responseTimeout`, and records each
request in the metrics with its final status.

A result is sent as TorchServe's `RestJob` sends it: the handler's status and
reason phrase, its headers, and its body as is. TorchServe sets a
`Content-Type` only when the handler set one (`context.set_response_content_type`
or a `content-type` response header), so a result without one is sent with no
`Content-Type` at all. Every verb but OPTIONS predicts, as in TorchServe;
OPTIONS answers the model's own OpenAPI description.

Streaming (a handler calling `send_intermediate_predict_response`): the first
intermediate result sends the status and headers with no `Content-Length`, so the
answer goes out with `Transfer-Encoding: chunked`; each intermediate result is
flushed as one chunk as it arrives and the final result is the last chunk. An
answer that streams nothing is sent exactly as before (`Content-Length`). Once
streaming started the status cannot change: a later failure (a handler error, a
worker death, `responseTimeout` for the whole batch) is logged and the connection
closed without the terminating chunk, so clients see a truncated answer. A client
that disconnects mid-stream is dropped quietly; the worker finishes the batch. The
KServe routes wrap outputs in JSON envelopes and answer with the final result only.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypeVar

from tornado import web
from tornado.http1connection import HTTP1Connection
from tornado.httputil import HTTPServerRequest

from ..batching import ChunkSink, no_worker_message
from ..errors import ServeError, ServiceUnavailable
from ..protocol import InferenceRequest, InferenceResult
from ..registry import Model
from .access import EXECUTE, READ, allow
from .base import ServeRoute
from .openapi import model_api
from .requests import to_inference_request

DEFAULT_MAX_REQUEST_SIZE = 6553500
T = TypeVar("T")


class RequestTooLarge(ServeError):
    """The request body exceeds `max_request_size` (Netty's aggregator answers 413)."""

    status_code = 413
    error_type = "RequestEntityTooLargeException"


def request_size_error(
    request: HTTPServerRequest, settings: dict[str, Any]
) -> RequestTooLarge | None:
    """The 413 for a body (or announced length) over the app's `max_request_size`, else None."""
    app = settings.get("serve_app")
    limit = int(getattr(app, "max_request_size", DEFAULT_MAX_REQUEST_SIZE))
    announced = request.headers.get("Content-Length", "")
    size = int(announced) if announced.isdigit() else 0
    if max(size, len(request.body or b"")) > limit:
        return RequestTooLarge(f"Request size exceeds the limit of {limit} bytes.")
    return None


class ClientTimedOut(Exception):
    """`clientTimeoutInMills` passed before the answer: TorchServe drops it, sends nothing."""


async def within_client_timeout(future: asyncio.Future[T], timeout_ms: int) -> T:
    """The request's result, unless the model's `clientTimeoutInMills` passes first.

    TorchServe drops a request whose client timeout passed while it was queued (it never
    reaches a worker: cancelling the future makes the batcher skip it) and drops a
    result that comes back too late; the client gets no answer at all.
    """
    if timeout_ms <= 0:
        return await future
    try:
        return await asyncio.wait_for(future, timeout_ms / 1000)
    except asyncio.TimeoutError:
        raise ClientTimedOut() from None


def check_has_workers(model: Model, name: str, version: str | None) -> None:
    """503 with TorchServe's message when the model version has no worker."""
    if model.pool.worker_count == 0:
        raise ServiceUnavailable(no_worker_message(name, version))


class InferenceRoute(ServeRoute):
    """Base of the routes that run requests through a model's batcher."""

    _target: tuple[str, str | None, str] | None = None  # name, version asked, version served
    _started: float = 0.0
    _queue_ms: float = 0.0
    _pending: tuple[asyncio.Future[InferenceResult], ...] = ()
    _streaming = False  # an intermediate result was sent: the headers are gone
    _gone = False  # the client closed the connection

    # ---- the hot path: what jupyter_server does per request that predictions don't need ----

    def set_secure_cookie(self, *args: Any, **kwargs: Any) -> None:
        """Prediction answers set no login cookie.

        jupyter_server re-signs and sends a login cookie on every token-authenticated
        request that came without one, which API clients never send back (about 14% of
        the server's CPU per prediction, tech-notes.md). Auth itself is unchanged: the
        token (or a browser's existing cookie plus XSRF) is still checked every time.
        """

    def _log(self) -> None:
        """Successful predictions skip jupyter_server's access log; errors are still logged.

        Their counts and latencies are in /metrics (TorchServe's names) instead.
        """
        if self.get_status() >= 400:
            super()._log()

    def check_request_size(self) -> None:
        """413 when the body (or its announced length) exceeds `max_request_size`."""
        error = request_size_error(self.request, self.settings)
        if error is not None:
            raise error

    def serving_model(self, name: str, version: str | None) -> Model:
        """The model version to run; 404 when unknown, 503 when it has no worker."""
        model = self.registry.get(name, version)
        self._target, self._started = (name, version, model.version), time.perf_counter()
        check_has_workers(model, name, version)
        return model

    def submit(
        self, model: Model, request: InferenceRequest, on_chunk: ChunkSink | None = None
    ) -> asyncio.Future[InferenceResult]:
        """Queue `request` on the model's batcher, due within its `responseTimeout`."""
        deadline = asyncio.get_running_loop().time() + model.spec.response_timeout
        return model.batcher.submit(request, deadline, on_chunk=on_chunk)

    async def run(self, model: Model, requests: list[InferenceRequest]) -> list[InferenceResult]:
        """Submit every request to the model's batcher and await all results, in order.

        Raises:
            ClientTimedOut: the model's `clientTimeoutInMills` passed first; every
                request still queued is dropped (`drop_answer` sends nothing).
        """
        self._pending = tuple(self.submit(model, request) for request in requests)
        gathered: asyncio.Future[list[InferenceResult]] = asyncio.gather(*self._pending)
        results = await within_client_timeout(gathered, model.spec.client_timeout_ms)
        self._queue_ms = max((result.queue_ms for result in results), default=0.0)
        return results

    async def respond(self, model: Model, request: InferenceRequest) -> None:
        """Run one request and answer it, streaming its intermediate results if any."""
        future = self.submit(model, request, on_chunk=self.send_chunk)
        self._pending = (future,)
        try:
            result = await within_client_timeout(future, model.spec.client_timeout_ms)
        except ClientTimedOut:
            self.drop_answer()
            return
        except asyncio.CancelledError:
            if self._streaming and self._gone:
                return  # the client left mid-stream (on_connection_close dropped the request)
            raise
        except ServeError as error:
            if not self._streaming:
                raise
            self.abort_stream(error)
            return
        self._queue_ms = result.queue_ms
        self.send_result(result)

    def drop_answer(self) -> None:
        """Send nothing, as TorchServe past `clientTimeoutInMills`: the client gives up."""
        self.log.warning("Drop response for inference request %s due to client timeout",
                         self.request_id)  # fmt: skip
        self._auto_finish = False  # the connection stays open until the client leaves
        if self._streaming and isinstance(self.request.connection, HTTP1Connection):
            self.request.connection.close()

    def send_result(self, result: InferenceResult) -> None:
        """Answer with the handler's status, reason, content type, headers and raw body."""
        if not self._streaming:
            self.set_result_headers(result)
        self.send_raw(result.body)  # after streamed chunks: the last chunk

    def set_result_headers(self, result: InferenceResult) -> None:
        self.set_status(result.status, result.reason or None)
        self.clear_header("Content-Type")
        if result.content_type:
            self.set_header("Content-Type", result.content_type)
        for name, value in result.headers.items():
            self.set_header(name, value)

    def send_chunk(self, result: InferenceResult) -> None:
        """Send one intermediate result as one HTTP chunk (the first one with the headers).

        The flush is not awaited: the pool calls this between frames of the batch, and
        tornado queues writes in order (a write to a closed connection fails quietly).
        """
        if self._finished or self._gone:
            return
        if not self._streaming:
            self._streaming = True
            self.set_result_headers(result)
            connection = self.request.connection
            if isinstance(connection, HTTP1Connection):
                connection.stream.set_nodelay(True)  # each chunk leaves at once (no Nagle)
        self.write(result.body)
        self.flush()

    def abort_stream(self, error: ServeError) -> None:
        """A failure after the headers left: log it and cut the answer short."""
        self.log.warning(
            "Streamed answer %s failed (%d): %s", self.request_id, error.status_code, error.message
        )
        self.set_status(error.status_code)  # for the metrics and the access log only
        connection = self.request.connection
        if isinstance(connection, HTTP1Connection):
            connection.close()  # no terminating chunk: the client sees a truncated answer

    def send_raw(self, body: bytes) -> None:
        """Finish without APIHandler's forced JSON content type."""
        self.update_api_activity()
        web.RequestHandler.finish(self, body)

    def on_connection_close(self) -> None:
        """The client went away: drop its queued requests (the batcher skips them)."""
        self._gone = True
        for future in self._pending:
            future.cancel()
        super().on_connection_close()

    def on_finish(self) -> None:
        if self._target is not None:
            name, version, served = self._target
            latency_us = (time.perf_counter() - self._started) * 1e6
            self.metrics.record_request(
                name,
                version,
                self.get_status(),
                latency_us,
                self._queue_ms * 1000,
                served_version=served,
            )
        super().on_finish()


class PredictionRoute(InferenceRoute):
    """`predictions/{m}[/{v}[/{extra...}]]`: extra segments reach the handler as `url_path`."""

    explain = False

    @allow(EXECUTE)
    async def _predict(
        self, name: str, version: str | None = None, extra: str | None = None
    ) -> None:
        self.check_request_size()
        model = self.serving_model(name, version)
        request = to_inference_request(
            self.request, self.request_id, explain=self.explain, url_path=extra
        )
        await self.respond(model, request)

    get = post = put = delete = patch = _predict

    @allow(READ)
    def options_document(self, name: str, version: str | None = None, *_: str | None) -> None:
        self.write_json(model_api(self.registry.get(name, version)))


class ExplanationRoute(PredictionRoute):
    """`explanations/{m}[/{v}]`: the same path with the `explain: True` header."""

    explain = True


class PingRoute(ServeRoute):
    """`GET {base_url}serve/ping`: 200 Healthy, or 500 Unhealthy when a model lacks workers."""

    @allow(READ)
    def get(self) -> None:
        if self.registry.healthy():
            self.write_json({"status": "Healthy"})
        else:
            self.write_json({"status": "Unhealthy"}, status=500)


_MODEL_PATH = r"/([^/]+)(?:/([^/]+)(?:/(.+))?)?/?"

ROUTES: list[tuple[str, type[Any]]] = [
    (r"ping", PingRoute),
    (r"predictions" + _MODEL_PATH, PredictionRoute),
    (r"explanations" + _MODEL_PATH, ExplanationRoute),
]
