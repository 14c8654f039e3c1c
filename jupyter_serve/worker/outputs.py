"""Handler output into per-request results: body bytes plus what the handler set on the context.

`handle` must return a list with one item per request. Each item is encoded as
TorchServe encodes it: `bytes`/`bytearray` as they are, `str` as UTF-8, a
`torch.Tensor` with `torch.save` (only looked for when torch is already imported),
anything else with ``json.dumps(item, indent=2)``.

A result's status, reason phrase, content type and headers are the ones the handler
set through the context for that request, with TorchServe's `ts_stream_next` (whether
the request's answer goes on in a later call: continuous batching) worked out from the
handler's `context.stopping_criteria` (`mark_stream_next`); the content type stays None when the
handler set none (the route picks the default). Broken output raises
`InvalidOutput` carrying TorchServe's message, and the batch fails with 503.
"""

from __future__ import annotations

import io
import json
import sys
from typing import Any

from jupyter_serve.wire.protocol import STREAM_NEXT, InferenceResult
from jupyter_serve.worker.context import Context
from jupyter_serve.worker.numbers_json import numbers_json

NOT_A_LIST = "Invalid model predict output"
WRONG_LENGTH = "number of batch response mismatched"
UNSUPPORTED = "Unsupported model output data type."


class InvalidOutput(Exception):
    """`handle` returned something that cannot answer the batch."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(f"{message}: {detail}")
        self.message = message
        self.detail = detail


def build_results(outputs: Any, context: Context) -> list[InferenceResult]:
    """One `InferenceResult` per request of the context's batch."""
    expected = len(context.request_ids)
    if not isinstance(outputs, list):
        detail = f"handle() returned {type(outputs).__name__}; it must return a list"
        raise InvalidOutput(NOT_A_LIST, f"{detail} of {expected} items")
    if len(outputs) != expected:
        detail = f"handle() returned {len(outputs)} items for a batch of {expected} requests"
        raise InvalidOutput(WRONG_LENGTH, detail)
    results = []
    for idx, item in enumerate(outputs):
        mark_stream_next(context, idx, item)
        results.append(result_for(idx, item, context))
    return results


def mark_stream_next(context: Context, idx: int, item: Any) -> None:
    """Set request `idx`'s `ts_stream_next` for its final item, as TorchServe's backend does:
    from the handler's `context.stopping_criteria[idx](item)` when it has them (True: the
    answer ends here, "false"; False: it goes on, "true"; None: a plain answer, no header),
    else "false" when intermediate results of this call said "true"."""
    criteria = context.stopping_criteria
    if criteria:
        stop = criteria[idx](item)
        if stop is not None:
            context.set_response_header(idx, STREAM_NEXT, "false" if stop else "true")
    elif context.get_response_headers(idx).get(STREAM_NEXT) == "true":
        context.set_response_header(idx, STREAM_NEXT, "false")


def result_for(
    idx: int, item: Any, context: Context, request_id: str | None = None
) -> InferenceResult:
    """Request `idx`'s result: `item` encoded, with what the handler set on the context."""
    processor = context.request_processor[idx]
    return InferenceResult(
        request_id=context.request_ids[idx] if request_id is None else request_id,
        status=processor.get_response_status_code(),
        body=encode_output(item, idx),
        content_type=processor.content_type(),
        reason=processor.get_response_status_phrase(),
        headers=processor.other_headers(),
    )


def encode_output(item: Any, idx: int = 0) -> bytes:
    """The response body for one output item."""
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, str):  # a lone surrogate (JSON's "\ud800") comes back as that escape
        return item.encode("utf-8", "backslashreplace")
    tensor = _tensor_bytes(item)
    if tensor is not None:
        return tensor
    text = numbers_json(item)  # the same text, without json's pure-Python encoder
    if text is not None:
        return text.encode("ascii")
    try:
        return json.dumps(item, indent=2).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidOutput(UNSUPPORTED, f"output item {idx}: {exc}") from exc


def _tensor_bytes(item: Any) -> bytes | None:
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(item, torch.Tensor):
        return None
    buffer = io.BytesIO()
    torch.save(item, buffer)
    return buffer.getvalue()
