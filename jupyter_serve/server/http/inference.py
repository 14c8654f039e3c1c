"""Inference routes: `ping`, predictions and explanations (TorchServe's inference API).

`InferenceRoute` is the base of every route that answers one prediction request
(the aliases and KServe's pass-through build on it too): it hands the request to
an `Exchange` (`server/http/exchange.py`: 413, 404, 503, the batcher, streaming,
`clientTimeoutInMills`, errors, metrics) and writes the answer through
`HandlerWriter`, so the answer goes out as a `RequestHandler`'s: with jupyter_server's
headers (CORS, security) and its access log for errors. Every verb but OPTIONS
predicts, as in TorchServe; OPTIONS answers the model's own OpenAPI description.

A result is sent as TorchServe's `RestJob` sends it: the handler's status and
reason phrase, its headers, and its body as is. TorchServe sets a `Content-Type`
only when the handler set one (`context.set_response_content_type` or a
`content-type` response header), so a result without one is sent with no
`Content-Type` at all. A streamed answer (a handler calling
`send_intermediate_predict_response`) goes out with `Transfer-Encoding: chunked`,
one chunk per intermediate result; an answer that streams nothing is sent exactly
as before (`Content-Length`). The KServe routes wrap outputs in JSON envelopes and
answer with the final result only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tornado import web
from tornado.http1connection import HTTP1Connection

from jupyter_serve.server.http.access import EXECUTE, READ, allow
from jupyter_serve.server.http.base import ServeRoute
from jupyter_serve.server.http.exchange import MODEL_PATH, Exchange, Job, Writer
from jupyter_serve.server.http.openapi import model_api
from jupyter_serve.server.http.requests import to_inference_request
from jupyter_serve.wire.errors import ServeError
from jupyter_serve.wire.protocol import InferenceResult


class InferenceRoute(ServeRoute):
    """Base of the routes that answer prediction requests through an `Exchange`."""

    _exchange: Exchange | None = None
    _gone = False  # the client closed the connection
    quiet_when_ok = True  # successes skip the access log (server/http/access_log.py)

    # ---- the hot path: what jupyter_server does per request that predictions don't need ----

    def set_secure_cookie(self, *args: Any, **kwargs: Any) -> None:
        """Prediction answers set no login cookie.

        jupyter_server re-signs and sends a login cookie on every token-authenticated
        request that came without one, which API clients never send back (a sizeable share
        of the server's CPU per prediction: bench/profile_server.py shows it). Auth itself
        is unchanged: the token (or a browser's existing cookie plus XSRF) is still checked
        every time.
        """

    async def respond(self, prepare: Callable[[], Job]) -> None:
        """Answer one prediction request (`prepare` names the model and builds the request
        after the size check); return once the answer is complete or the client gone.

        A dropped answer (`clientTimeoutInMills`) sends nothing, so this returns only when
        the client has left; tornado's closing `finish` then writes nowhere.
        """
        if self._gone:
            return
        self._exchange = Exchange(self.make_writer(), self.settings, self.request_id, self.log)
        self._exchange.start(self.request, prepare)
        await self._exchange.finished()

    def make_writer(self) -> Writer:
        """What writes this route's answers: the handler's result as TorchServe sends it."""
        return HandlerWriter(self)

    def on_connection_close(self) -> None:
        """The client went away: its exchange drops the request (the batcher skips it)."""
        self._gone = True
        if self._exchange is not None:
            self._exchange.client_gone()
        super().on_connection_close()


class HandlerWriter:
    """An exchange's `Writer` over its route: the answer is the `RequestHandler`'s, with
    jupyter_server's default headers, `x-request-id`, and the base route's error JSON."""

    def __init__(self, route: ServeRoute) -> None:
        self.route = route

    def answer(self, result: InferenceResult) -> None:
        self.set_result_headers(result)
        self.finish(result.body)

    def error(self, error: ServeError) -> None:
        """As tornado answers an exception: logged by the route, then its `write_error`."""
        exc_info = (type(error), error, error.__traceback__)
        self.route.log_exception(*exc_info)
        self.route.send_error(error.status_code, exc_info=exc_info)

    def begin(self, result: InferenceResult) -> None:
        self.set_result_headers(result)
        connection = self.route.request.connection
        if isinstance(connection, HTTP1Connection):
            connection.stream.set_nodelay(True)  # each chunk leaves at once (no Nagle)
        self.chunk(result.body)

    def chunk(self, body: bytes) -> None:
        """Flushed, not awaited: tornado queues writes in order (to a closed connection,
        they fail quietly)."""
        self.route.write(body)
        self.route.flush()

    def end(self, body: bytes) -> None:
        self.finish(body)

    def cut(self, status: int) -> None:
        self.route.set_status(status)  # for the access log only: the headers have left
        connection = self.route.request.connection
        if isinstance(connection, HTTP1Connection):
            connection.close()

    def set_result_headers(self, result: InferenceResult) -> None:
        route = self.route
        route.set_status(result.status, result.reason or None)
        route.clear_header("Content-Type")
        if result.content_type:
            route.set_header("Content-Type", result.content_type)
        for name, value in result.headers.items():
            route.set_header(name, value)

    def finish(self, body: bytes) -> None:
        """Finish without APIHandler's forced JSON content type."""
        self.route.update_api_activity()
        web.RequestHandler.finish(self.route, body)


class PredictionRoute(InferenceRoute):
    """`predictions/{m}[/{v}[/{extra...}]]`: extra segments reach the handler as `url_path`."""

    explain = False
    guards_cookie_gets = True  # a GET runs the model: no cross-site link may (base.py)

    @allow(EXECUTE)
    async def _predict(
        self, name: str, version: str | None = None, extra: str | None = None
    ) -> None:
        def prepare() -> Job:
            request = to_inference_request(
                self.request, self.request_id, explain=self.explain, url_path=extra
            )
            return Job(name, version, request)

        await self.respond(prepare)

    get = post = put = delete = patch = _predict

    @allow(READ)
    def options_document(self, name: str, version: str | None = None, *_: str | None) -> None:
        self.write_json(model_api(self.registry.get(name, version), str(self.base_url)))


class ExplanationRoute(PredictionRoute):
    """`explanations/{m}[/{v}]`: the same path with the `explain: True` header."""

    explain = True


class PingRoute(ServeRoute):
    """`{base_url}serve/ping`: 200 Healthy, or 500 Unhealthy when a model lacks workers.

    TorchServe answers the health check whatever the verb (HEAD with no body); OPTIONS
    stays jupyter_server's (a browser's CORS preflight).
    """

    @allow(READ)
    def get(self) -> None:
        if self.registry.healthy():
            self.write_json({"status": "Healthy"})
        else:
            self.write_json({"status": "Unhealthy"}, status=500)

    head = post = put = delete = patch = get


ROUTES: list[tuple[str, type[Any]]] = [
    (r"ping(?:/.*)?", PingRoute),  # TorchServe answers ping/ and ping/anything too
    (r"predictions" + MODEL_PATH, PredictionRoute),
    (r"explanations" + MODEL_PATH, ExplanationRoute),
]
