"""Handing a worker's answers back to the requests of a batch: results, streamed chunks, errors.

Each waiting client holds the future of its `Pending` item. `deliver` sets the
final results (matched by position, else by request id), `fail` gives every
client still waiting its own copy of an error, and `stream` passes a streamed
chunk's intermediate results to the `on_chunk` sink of each request that has one
(by request id). A chunk whose batch-level status is not 200 fails the whole
batch with its message, as TorchServe's frontend does. Items whose client went
away (future done) are skipped throughout.
"""

from __future__ import annotations

from jupyter_serve.server.batching import Pending, fail
from jupyter_serve.server.pool.logs import LOGGER
from jupyter_serve.server.pool.worker import WorkerReply
from jupyter_serve.wire.errors import ServeError
from jupyter_serve.wire.protocol import InferenceResult, StreamChunk

__all__ = ["deliver", "fail", "pass_chunk", "stream", "with_queue_ms"]


def deliver(batch: list[Pending], reply: WorkerReply, dispatched: float) -> None:
    """Set each client's result (with its queue time), matched by position or else by id."""
    ids = [item.request.request_id for item in batch]
    results: list[InferenceResult | None] = list(reply.results)
    if [result.request_id for result in reply.results] != ids:
        by_id = {result.request_id: result for result in reply.results}
        results = [by_id.get(rid) for rid in ids]
    for item, result in zip(batch, results, strict=False):
        if item.alive and result is not None:
            queued = (dispatched - item.arrival) * 1000
            item.future.set_result(with_queue_ms(result, queued))
    missing = ServeError("number of batch response mismatched", status_code=503)
    fail(batch, missing)


def with_queue_ms(result: InferenceResult, queued: float) -> InferenceResult:
    """`result` with its queue time (what `dataclasses.replace` does, without its
    per-call field introspection: this runs once per request)."""
    return InferenceResult(result.request_id, result.status, result.body, result.content_type,
                           result.reason, result.headers, queued)  # fmt: skip


def stream(batch: list[Pending], chunk: StreamChunk) -> None:
    """Pass a streamed chunk on to the sinks of its requests (or fail the batch)."""
    if chunk.status != 200:
        message = chunk.message or "The handler failed while streaming"
        fail(batch, ServeError(message, status_code=chunk.status))
        return
    sinks = {item.request.request_id: item for item in batch if item.on_chunk is not None}
    for result in chunk.results:
        item = sinks.get(result.request_id)
        if item is not None:
            pass_chunk(item, result)


def pass_chunk(item: Pending, result: InferenceResult) -> None:
    """Hand `result` to `item`'s sink, if it has one and its client still waits."""
    if item.on_chunk is None or not item.alive:
        return
    try:
        item.on_chunk(result)
    except Exception:  # one client's sink must not cut the others off
        LOGGER.exception("Streaming to request %s failed", result.request_id)
