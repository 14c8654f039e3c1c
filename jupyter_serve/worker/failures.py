"""Exceptions into `E` frames: the status and message TorchServe gives each failure.

Classified by exception type, never by message text:

==========================================================  ======  =========================
exception (raised by the handler, or its `__cause__` chain)   status  message
==========================================================  ======  =========================
`MemoryError`, `torch.cuda.OutOfMemoryError` (torch loaded)    507     "Out of resources"
a `PredictionException` with an int `error_code`              code    its message
`InvalidOutput` (non-list, wrong length, unencodable item)    503     TorchServe's message
anything else                                                 503     "Prediction failed"
==========================================================  ======  =========================

The generic 503 also carries a `cause`, "<ExceptionType>: <message>" (`exception_cause`:
the message's first line, at most `CAUSE_LENGTH` characters, credential-looking
`name=value` pairs and URL passwords hidden), which the server adds to TorchServe's
error JSON beside the message, as server/registry/start_failure.py does for a failed load.

A `PredictionException` is any class named so in the exception's MRO that carries
an int `error_code`: ours (`jupyter_serve.handlers.exceptions`), TorchServe's
(`ts.utils.util`) and MMS's (`mms.service`) alike.

A failed load answers 507 when it ran out of memory and 500 otherwise.

A request whose inputs cannot be decoded fails alone, not its batch: it is
answered with its own result, 400 ``BadRequestException`` (`error_result`, built
by `inputs.build_batch`), inside the batch's `R` frame. When the handler then
fails on the other requests, they get that failure as results of the same `R`
frame (`Failure.result`), so the rejected requests keep their 400s; an `E` frame
answers a failed batch only when it rejected nobody.
"""

from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

from jupyter_serve.wire.errors import ServeError
from jupyter_serve.wire.logsafe import printable
from jupyter_serve.wire.protocol import Frame, InferenceResult, Kind
from jupyter_serve.worker.outputs import InvalidOutput

PREDICTION_FAILED = "Prediction failed"
OUT_OF_RESOURCES = "Out of resources"
CAUSE_LENGTH = 300  # characters of the handler's exception kept in the answer
_SECRET_PAIR = re.compile(
    r"([\w-]*(?:token|passw|secret|api[_-]?key|auth|credential)[\w-]*\s*[=:]\s*)[^\s&,;'\"]+",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"(://[^/\s:@]*:)[^/\s@]+@")


@dataclass(frozen=True)
class Failure:
    """What an `E` frame says about a failed load or batch."""

    status: int
    message: str
    traceback: str = ""
    cause: str = ""

    def frame(self) -> Frame:
        header = {
            "status": self.status,
            "type": ServeError.error_type,
            "message": self.message,
            "traceback": self.traceback,
        }
        if self.cause:
            header["cause"] = self.cause
        return Frame(Kind.ERROR, header)

    def result(self, request_id: str) -> InferenceResult:
        """This failure as one request's result, as the server answers an `E` frame."""
        error = ServeError(self.message, status_code=self.status, cause=self.cause or None)
        return error_result(request_id, error)


def error_result(request_id: str, error: ServeError) -> InferenceResult:
    """`error` as one request's answer: TorchServe's error JSON, as the server writes it."""
    return InferenceResult(request_id, error.status_code, error.body(), "application/json")


def prediction_failure(exc: BaseException) -> Failure:
    """The `E` frame answer to a batch whose handler raised `exc`."""
    text = format_traceback(exc)
    if is_out_of_memory(exc):
        return Failure(507, OUT_OF_RESOURCES, text)
    code = prediction_error_code(exc)
    if code is not None:
        return Failure(code, str(getattr(exc, "message", None) or exc), text)
    if isinstance(exc, InvalidOutput):
        return Failure(503, exc.message, exc.detail)
    return Failure(503, PREDICTION_FAILED, text, exception_cause(exc))


def exception_cause(exc: BaseException) -> str:
    """The one-line cause: "<ExceptionType>: <first line>", bounded, no credential."""
    lines = str(exc).strip().splitlines()
    if not lines:
        return type(exc).__name__
    first = _URL_PASSWORD.sub(r"\1[secret]@", _SECRET_PAIR.sub(r"\1[secret]", lines[0]))
    return printable(f"{type(exc).__name__}: {first}"[:CAUSE_LENGTH])


def load_failure(exc: BaseException, summary: str, details: str | None = None) -> Failure:
    """The `E` frame answer to a failed load."""
    status = 507 if is_out_of_memory(exc) else 500
    return Failure(status, summary, details if details is not None else format_traceback(exc))


def is_out_of_memory(exc: BaseException) -> bool:
    """MemoryError, or CUDA running out of memory, anywhere in the cause chain."""
    torch = sys.modules.get("torch")
    cuda_oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    kinds: tuple[type[BaseException], ...] = (MemoryError,)
    if isinstance(cuda_oom, type) and issubclass(cuda_oom, BaseException):
        kinds = (MemoryError, cuda_oom)
    return any(isinstance(e, kinds) for e in cause_chain(exc))


def prediction_error_code(exc: BaseException) -> int | None:
    """The `error_code` of a PredictionException (ours, TorchServe's or MMS's)."""
    is_prediction = any(cls.__name__ == "PredictionException" for cls in type(exc).__mro__)
    code = getattr(exc, "error_code", None)
    if is_prediction and isinstance(code, int) and not isinstance(code, bool):
        return code
    return None


def cause_chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then its explicit causes (`raise ... from ...`)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__


def format_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
