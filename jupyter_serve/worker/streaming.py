"""Streamed answers: TorchServe's `send_intermediate_predict_response`, for handlers in workers.

A handler streams by calling, once per intermediate chunk::

    send_intermediate_predict_response(ret_list, context.request_ids,
                                       "Intermediate Prediction success", 200, context)

and then returning the final chunk from `handle` as usual. Each call sends one
`S` frame over the worker's socket, right away (the server forwards each chunk as
one HTTP chunk). `ret_list[idx]` is encoded like `handle`'s items (bytes raw, str
UTF-8, else JSON) and carries request `idx`'s status, content type and headers as
the handler set them on the context at that moment. As in TorchServe, every
streamed request gets the response header `ts_stream_next: true`, and a `code`
other than 200 fails the whole batch with `message`.

The worker's `ModelService` sets `context.chunk_sink` for the length of a batch;
outside a batch (in `initialize`, on a context built by hand, from a thread still
running after `handle` returned) streaming raises `StreamingUnavailable`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jupyter_serve.wire.protocol import STREAM_NEXT, InferenceResult, StreamChunk
from jupyter_serve.worker.context import Context
from jupyter_serve.worker.outputs import WRONG_LENGTH, InvalidOutput, result_for


class StreamingUnavailable(RuntimeError):
    """Intermediate results were sent with no batch in flight to carry them."""


def send_intermediate_predict_response(
    ret: Any,
    req_id_map: Mapping[int, str],
    message: str,
    code: int,
    context: Context | None = None,
) -> None:
    """Send one intermediate result per request of `req_id_map` (usually `context.request_ids`).

    Args:
        ret: the chunk of each request, indexed like `req_id_map`'s keys.
        req_id_map: `{batch index: request id}` of the requests to stream to.
        message: TorchServe's batch-level message (the error text if `code` is not 200).
        code: TorchServe's batch-level status; anything but 200 fails the batch.
        context: the handler's context for this batch (required here, as in TorchServe).

    Raises:
        StreamingUnavailable: no batch is being served through `context`.
        InvalidOutput: `ret` has no item for one of the indexes (the batch fails with 503).
    """
    sink = None if context is None else context.chunk_sink
    if context is None or sink is None:
        raise StreamingUnavailable(
            "send_intermediate_predict_response needs the context of the batch being "
            "served (pass the handler's `context`, from inside handle())."
        )
    results = [_result(ret, idx, str(rid), context) for idx, rid in req_id_map.items()]
    sink(StreamChunk(results, int(code), str(message)))


def _result(ret: Any, idx: int, request_id: str, context: Context) -> InferenceResult:
    try:
        item = ret[idx]
    except (IndexError, KeyError, TypeError) as exc:
        detail = f"send_intermediate_predict_response got no item {idx} in {type(ret).__name__}"
        raise InvalidOutput(WRONG_LENGTH, detail) from exc
    context.set_response_header(idx, STREAM_NEXT, "true")
    return result_for(idx, item, context, request_id)
