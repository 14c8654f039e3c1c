"""One prediction request and its one answer, whatever carries them: `Exchange` and `Writer`.

An `Exchange` takes a request through TorchServe's steps and answers it once:

1. the model version (404), and TorchServe's 503 when it has no worker;
2. the model's batcher, with `deadline = now + responseTimeout`;
3. the handler's result as TorchServe's `RestJob` sends it: its status, reason,
   content type (only when the handler set one), headers and raw body. A handler
   that streams (`send_intermediate_predict_response`) gets a chunked answer: the
   first intermediate result sends the status and headers, each one is a chunk and
   the final result is the last chunk. Once streaming started the status cannot
   change: a later failure is logged and the answer cut short (no terminating
   chunk), so clients see a truncated answer;
4. a `ServeError` as TorchServe's error JSON with its status; anything else (a bug,
   a result the transport cannot write) as a 500, logged with its traceback;
5. past the model's `clientTimeoutInMills` the request is dropped (queued, it never
   reaches a worker; late, its result is thrown away) and the client gets nothing
   at all: the connection stays open until the client leaves (a streamed answer
   is cut);
6. a client that leaves cancels its request (the batcher skips it) and gets nothing;
7. every answer sent after the model was found is counted in the metrics with its
   status (a dropped answer or a departed client is not); one sent before (an unknown
   model's 404) counts in its status class alone (`Requests4XX`), as in TorchServe.

It writes through a `Writer`, one per transport: `server/http/inference.py` has the one
over a tornado `RequestHandler` (the full routes, which keep jupyter_server's headers and
logging), `server/http/fastpath.py` the one over the serve lane's connection. Each
transport tells the exchange when its client has left (`client_gone`). The body's size is
not checked here: the full route's `ServeRoute.prepare` checks it once, and the lane
leaves larger bodies to that route. There is no task per request: the answer is written
from the result future's done-callback, and a route, which must not return before its
answer is complete, awaits `finished()`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from tornado.httputil import HTTPServerRequest

from jupyter_serve.server.batching import ChunkSink, no_worker_message
from jupyter_serve.server.metrics.serve_metrics import ServeMetrics
from jupyter_serve.server.registry import Model
from jupyter_serve.wire.errors import ServeError, ServiceUnavailable
from jupyter_serve.wire.logsafe import printable
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult

LOGGER = logging.getLogger(__name__)

MODEL_PATH = r"/([^/]+)(?:/([^/]+)(?:/(.+))?)?/?"
"""`/{model}[/{version}[/{extra...}]]`, after `predictions` or `explanations` (unanchored)."""


class Job(NamedTuple):
    """What a request asks for: a model version, and the request its handler gets."""

    model: str
    version: str | None
    request: InferenceRequest


@dataclass(slots=True)
class Served:
    """The model version a request reached, and since when: its line in the metrics."""

    model: Model
    name: str
    version: str | None  # as the request named it (None: TorchServe's label "default")
    metrics: ServeMetrics
    started: float = field(default_factory=time.perf_counter)

    def check_workers(self) -> None:
        """503 with TorchServe's message when the model version has no worker."""
        if self.model.pool.worker_count == 0:
            raise ServiceUnavailable(no_worker_message(self.name, self.version))

    def submit(
        self, request: InferenceRequest, on_chunk: ChunkSink | None = None
    ) -> asyncio.Future[InferenceResult]:
        """Queue `request` on the model's batcher, due within its `responseTimeout`."""
        deadline = asyncio.get_running_loop().time() + self.model.spec.response_timeout
        return self.model.batcher.submit(request, deadline, on_chunk=on_chunk,
                                         version=self.version)  # fmt: skip

    def record(self, status: int, queue_ms: float) -> None:
        """Count one answered request, with the status it got."""
        latency_us = (time.perf_counter() - self.started) * 1e6
        self.metrics.record_request(self.name, self.version, status, latency_us,
                                    queue_ms * 1000, served_version=self.model.version)  # fmt: skip


def find_model(settings: Mapping[str, Any], name: str, version: str | None) -> Served:
    """The model version a request names (404 when there is none)."""
    model = settings["serve_registry"].get(name, version)
    return Served(model, name, version, settings["serve_metrics"])


class Writer(Protocol):
    """Where an exchange writes its answer. A write to a client that has gone is lost
    quietly: no method raises for it."""

    def answer(self, result: InferenceResult) -> None:
        """The whole answer: the handler's status, reason, content type, headers and body."""

    def error(self, error: ServeError) -> None:
        """The whole answer: TorchServe's error JSON for `error`, with its status (or, after
        an answer that failed half-way, whatever the transport does about that)."""

    def begin(self, result: InferenceResult) -> None:
        """Start a streamed answer: `result`'s status and headers, and its body as the first
        chunk (no Content-Length: the answer is chunked)."""

    def chunk(self, body: bytes) -> None:
        """The next chunk of a streamed answer."""

    def end(self, body: bytes) -> None:
        """The last chunk of a streamed answer, and its end."""

    def cut(self, status: int) -> None:
        """Close the connection in the middle of a streamed answer (no terminating chunk);
        `status` is what the answer came to, for the server's own log."""


class Exchange:
    """One prediction request and its one answer, written through `writer` (module docstring).

    Call `start` once; the transport calls `client_gone` when its client leaves.
    """

    __slots__ = (
        "log", "over", "pending", "request_id", "served", "settings", "status", "streaming",
        "timer", "waiter", "writer",
    )  # fmt: skip

    def __init__(
        self,
        writer: Writer,
        settings: Mapping[str, Any],
        request_id: str,
        log: logging.Logger | logging.LoggerAdapter[Any] = LOGGER,
    ) -> None:
        self.writer = writer
        self.settings = settings
        self.request_id = request_id
        self.log = log
        self.served: Served | None = None
        self.pending: asyncio.Future[InferenceResult] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.streaming = False  # the status and headers left with a first chunk
        self.status = 0  # the status a streamed answer was sent with
        self.over = False  # answered, cut short, or the client gone: nothing more to write
        self.waiter: asyncio.Future[None] | None = None

    def start(self, request: HTTPServerRequest, prepare: Callable[[], Job]) -> None:
        """Check and queue the request; it is answered when its result comes.

        `prepare`, called after the size check, names the model version and builds the
        request the handler gets; a `ServeError` it raises is the answer.
        """
        try:
            self.pending = self._submit(request, prepare)
        except ServeError as error:
            self._fail(error)
            return
        except Exception:  # a bug must not leave the client waiting: 500
            self.log.exception("Prediction %s failed", self.request_id)
            self._fail(ServeError("Internal server error"))
            return
        self.pending.add_done_callback(self._settle)

    def _submit(
        self, request: HTTPServerRequest, prepare: Callable[[], Job]
    ) -> asyncio.Future[InferenceResult]:
        """The job, 404, 503, then the model's batcher (and the client's timer)."""
        job = prepare()
        served = self.served = find_model(self.settings, job.model, job.version)
        served.check_workers()
        future = served.submit(job.request, on_chunk=self._chunk)
        timeout_ms = served.model.spec.client_timeout_ms
        if timeout_ms > 0:
            loop = asyncio.get_running_loop()
            self.timer = loop.call_later(timeout_ms / 1000, future.cancel)
        return future

    def client_gone(self) -> None:
        """The client left: drop its request (the batcher skips it); nothing is written."""
        if self.pending is not None:
            self.pending.cancel()
        self._end()

    async def finished(self) -> None:
        """Wait until the exchange is over: answered, cut short, or its client gone."""
        if not self.over:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter

    def _settle(self, future: asyncio.Future[InferenceResult]) -> None:
        """The result future is done: answer with it."""
        if self.over:
            return  # the client left
        try:
            self._answer(future)
        except Exception:  # the answer could not be written (a bug, a body its status forbids)
            self.log.exception("Answering prediction %s failed", self.request_id)
            self._fail(ServeError("Internal server error"))

    def _answer(self, future: asyncio.Future[InferenceResult]) -> None:
        if future.cancelled():  # by the client timeout (a client gone ended the exchange)
            self._drop()
            return
        error = future.exception()
        if error is None:
            self._send(future.result())
        elif isinstance(error, ServeError):
            self._fail(error)
        else:
            self.log.error("Prediction %s failed", self.request_id, exc_info=error)
            self._fail(ServeError("Internal server error"))

    def _chunk(self, result: InferenceResult) -> None:
        """One intermediate result: the first starts a streamed answer, the next follow."""
        if self.over:
            return
        if self.streaming:
            self.writer.chunk(bytes(result.body))
            return
        self.streaming, self.status = True, result.status
        self.writer.begin(result)

    def _send(self, result: InferenceResult) -> None:
        if self.streaming:
            self.writer.end(bytes(result.body))
            self._answered(self.status, result.queue_ms)
        else:
            self.writer.answer(result)
            self._answered(result.status, result.queue_ms)

    def _fail(self, error: ServeError) -> None:
        """Answer with TorchServe's error JSON or, once streaming, cut the answer short."""
        if self.streaming:
            message = printable(error.message)
            self.log.warning("Streamed answer %s failed (%d): %s",
                             self.request_id, error.status_code, message)  # fmt: skip
            self.writer.cut(error.status_code)
        else:
            self.writer.error(error)
        self._answered(error.status_code, 0.0)

    def _drop(self) -> None:
        """Send nothing, as TorchServe past `clientTimeoutInMills`: the client gives up."""
        self.log.warning("Drop response for inference request %s due to client timeout",
                         self.request_id)  # fmt: skip
        if self.streaming:
            self.writer.cut(self.status)
            self._end()
        # else nothing is written; the exchange is over when the client leaves

    def _answered(self, status: int, queue_ms: float) -> None:
        if self.served is not None:
            self.served.record(status, queue_ms)
        else:  # no model version took it (404, a bad request): its status class alone
            self.settings["serve_metrics"].record_status(status)
        self._end()

    def _end(self) -> None:
        self.over = True
        if self.timer is not None:
            self.timer.cancel()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
