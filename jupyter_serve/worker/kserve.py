"""KServe v1 and v2 requests the server forwards undecoded, opened here in the worker.

The Jupyter server never parses a KServe body: its loop serves the user's kernels
and files too, and one 6 MB JSON tensor costs a parse that holds the GIL for a
fifth of a second. Its KServe routes (server/http/kserve.py) send each request as one
job, body untouched, with the `KSERVE_HEADER` header (protocol.py) saying which
protocol it is, how many items the model's queue would take (`room`), how many
elements its tensors may hold and which model version answers. Here, before the
handler runs (`run_batch` in service.py):

* `expand` turns each such request into its items, one handler row each, exactly
  as `worker/kserve_codec.py` builds them: v1 `instances`, v2 `inputs` (shaped,
  binary data decoded). A request that is no envelope at all goes to the handler
  as it came (TorchServe without `service_envelope`); one that breaks a rule
  (a malformed envelope, a shape that describes no data, more elements than
  allowed, more items than the queue takes) is answered at once with its error,
  and the others of the batch still run;
* a body sent with `Content-Encoding: gzip` or `deflate` (tritonclient's
  `request_compression_algorithm`) is decompressed first (`inflate`), to at most the
  server's `max_request_size` bytes;
* `collect` folds the rows' results back into one answer per request: a failed
  row answers for its whole request; otherwise `{"predictions": [...]}` (or
  `explanations`) for v1, the v2 response (with binary outputs when asked) for v2.

All rows of a batch go to the handler in one call, so a request's items are batched
together and with the other requests of its batch.
"""

from __future__ import annotations

import json
import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from jupyter_serve.wire.errors import (
    DEFAULT_MAX_REQUEST_SIZE,
    BadRequest,
    RequestTooLarge,
    ServeError,
)
from jupyter_serve.wire.oip import BINARY_HEADER, BINARY_TYPE, DEFAULT_MAX_TENSOR_ELEMENTS
from jupyter_serve.wire.protocol import KSERVE_HEADER, InferenceRequest, InferenceResult
from jupyter_serve.worker.failures import error_result, format_traceback
from jupyter_serve.worker.inputs import UNDECODABLE
from jupyter_serve.worker.kserve_codec import (
    JSON_TYPE,
    TOO_DEEP,
    Items,
    Limits,
    v1_answer,
    v1_items,
    v2_answer,
    v2_items,
)
from jupyter_serve.worker.kserve_outputs import TENSOR_HEADER

__all__ = ["Forwarded", "expand", "inflate"]

WBITS = {"gzip": 31, "x-gzip": 31, "deflate": 15}  # zlib's wbits: gzip, zlib format


@dataclass(frozen=True)
class Settings:
    """What the server put in a forwarded request's `KSERVE_HEADER`."""

    protocol: str  # "v1" or "v2"
    room: int
    max_elements: int
    model: tuple[str, str]  # (name, version) that answers a v2 request
    max_bytes: int = DEFAULT_MAX_REQUEST_SIZE  # a compressed body's most bytes, decompressed
    # (the server sends its own max_request_size)

    @classmethod
    def read(cls, text: str) -> Settings:
        try:
            value = json.loads(text)
            name, version = value["model"]
            return cls(str(value["protocol"]), int(value["room"]),
                       int(value.get("max_elements", DEFAULT_MAX_TENSOR_ELEMENTS)),
                       (str(name), str(version)),
                       int(value.get("max_bytes", DEFAULT_MAX_REQUEST_SIZE)))  # fmt: skip
        except (ValueError, KeyError, TypeError) as exc:
            raise BadRequest(f"Malformed {KSERVE_HEADER} header: {exc}") from None


@dataclass
class Opened:
    """One request of the batch: its rows among the expanded requests, and how to answer."""

    first: int  # its first row among `Forwarded.requests`
    count: int  # how many rows it has there
    items: Items | None = None  # a KServe envelope's items (None: answered as it is)
    settings: Settings | None = None
    explain: bool = False  # v1 answers `explanations` (the server's `explain` header)
    answer: InferenceResult | None = None  # answered before the handler (an error)


@dataclass
class Forwarded:
    """A batch with its KServe requests opened: `requests` go to the handler."""

    requests: list[InferenceRequest] = field(default_factory=list)
    opened: list[Opened] = field(default_factory=list)

    @property
    def opened_ids(self) -> frozenset[str]:
        """The request ids of the envelopes opened: each gets one answer, nothing streamed."""
        return frozenset(self.requests[entry.first].request_id for entry in self.opened
                         if entry.items is not None and entry.count)  # fmt: skip

    @property
    def answered(self) -> bool:
        """Whether some request was answered before the handler ran."""
        return any(entry.answer is not None for entry in self.opened)

    def collect(self, results: Sequence[InferenceResult]) -> list[InferenceResult]:
        """One result per request of the batch, from the results of `requests`."""
        return [_answer(entry, results[entry.first : entry.first + entry.count])
                for entry in self.opened]  # fmt: skip


def expand(requests: Sequence[InferenceRequest]) -> Forwarded:
    """The batch with each forwarded KServe request turned into its rows (module docstring)."""
    forwarded = Forwarded()
    for request in requests:
        entry = Opened(first=len(forwarded.requests), count=0)
        forwarded.opened.append(entry)
        marker = request.headers.get(KSERVE_HEADER)
        rows = [request] if marker is None else _open(request, marker, entry)
        forwarded.requests.extend(rows)
        entry.count = len(rows)
    return forwarded


def _open(request: InferenceRequest, marker: str, entry: Opened) -> list[InferenceRequest]:
    """The rows of one forwarded request (its answer set instead when it breaks a rule)."""
    headers = {name: value for name, value in request.headers.items() if name != KSERVE_HEADER}
    plain = InferenceRequest(request.request_id, headers, request.parameters)
    try:
        settings = Settings.read(marker)
        items = _items(plain, settings)
    except ServeError as error:
        entry.answer = error_result(request.request_id, error)
        return []
    except RecursionError:
        entry.answer = error_result(request.request_id, BadRequest(TOO_DEEP))
        return []
    except Exception as exc:  # nothing a request contains may end the worker (inputs.py)
        print(format_traceback(exc), file=sys.stderr, flush=True)
        entry.answer = error_result(request.request_id, BadRequest(UNDECODABLE))
        return []
    if items is None:  # no envelope: the body is the handler's one row, as in TorchServe
        return [plain]
    entry.items, entry.settings = items, settings
    entry.explain = _header(headers, "explain") == "True"
    return [InferenceRequest(request.request_id, headers, row) for row in items.rows]


def _items(request: InferenceRequest, settings: Settings) -> Items | None:
    body = bytes(request.parameters[0].value) if request.parameters else b""
    encoding = _header(request.headers, "Content-Encoding")
    body = inflate(body, encoding, settings.max_bytes) if encoding else body
    limits = Limits(settings.model[0], settings.room, settings.max_elements)
    if settings.protocol == "v1":
        return v1_items(body, limits)
    return v2_items(body, _header(request.headers, BINARY_HEADER), limits)


def inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """A body sent with `Content-Encoding: gzip` (or `x-gzip`) or `deflate` (zlib's format,
    as HTTP has it), decompressed; any other encoding's as it came. Never more than `limit`
    bytes are made (zlib's `max_length`, however small the body): 413 past them, 400 for a
    body that is no such stream, is cut short or has bytes after it."""
    wbits = WBITS.get(encoding.strip().lower())
    if wbits is None:
        return body
    out, data = bytearray(), body
    while True:  # a gzip body may hold several members, one after the other
        inflater = zlib.decompressobj(wbits)
        try:
            out += inflater.decompress(data, limit + 1 - len(out))
        except zlib.error as exc:
            raise BadRequest(f"The {encoding} request body cannot be decompressed: {exc}") from None
        if len(out) > limit:
            raise RequestTooLarge(f"The decompressed request body exceeds the limit of {limit} "
                                  "bytes (max_request_size).")  # fmt: skip
        if not inflater.eof:
            raise BadRequest(f"The {encoding} request body is cut short.")
        data = inflater.unused_data
        if not data:
            return bytes(out)
        if wbits != WBITS["gzip"]:
            raise BadRequest(f"The {encoding} request body has bytes after its end.")


def _header(headers: dict[str, str], name: str) -> str | None:
    wanted = name.lower()
    return next((value for key, value in headers.items() if key.lower() == wanted), None)


def _answer(entry: Opened, results: Sequence[InferenceResult]) -> InferenceResult:
    """The one answer of a request whose rows had `results`."""
    if entry.answer is not None:
        return entry.answer
    if entry.items is None or entry.settings is None:
        return results[0]  # a body that was no envelope: the handler's answer as it is
    failed = next((result for result in results if not 200 <= result.status < 300), None)
    if failed is not None:  # as the handler answered it (our own header left out)
        headers = {k: v for k, v in failed.headers.items() if k != TENSOR_HEADER}
        return replace(failed, headers=headers)
    request_id = results[0].request_id if results else ""
    try:
        return _envelope_answer(entry, entry.items, entry.settings, results, request_id)
    except ServeError as error:
        return error_result(request_id, error)
    except Exception as exc:  # an output no answer can carry: this request's 500 alone
        print(format_traceback(exc), file=sys.stderr, flush=True)
        return error_result(request_id, ServeError(f"Cannot answer: {type(exc).__name__}"))


def _envelope_answer(
    entry: Opened,
    items: Items,
    settings: Settings,
    results: Sequence[InferenceResult],
    request_id: str,
) -> InferenceResult:
    bodies = [result.body for result in results]
    if settings.protocol == "v1":
        key = "explanations" if entry.explain else "predictions"
        return InferenceResult(request_id, 200, v1_answer(bodies, key), JSON_TYPE)
    kinds = [result.headers.get(TENSOR_HEADER) for result in results]
    body, header_length = v2_answer(bodies, items, settings.model, request_id, kinds)
    if header_length is None:
        return InferenceResult(request_id, 200, body, JSON_TYPE)
    return InferenceResult(request_id, 200, body, BINARY_TYPE,
                           headers={BINARY_HEADER: str(header_length)})  # fmt: skip
