"""Errors the worker pool reports, each a `ServeError` carrying its HTTP status.

* `WorkerLoadError`: a worker failed to load its model (500, or 507 out of memory).
* `WorkerDied`: a worker died or hung with a batch in flight (500; 507 when the
  process was SIGKILLed from outside, e.g. by the kernel's OOM killer, which
  TorchServe reports for exit code 137).
* `BatchFailed`: the worker answered a batch with an `E` frame (the handler
  raised); status, type and message are the worker's.

Every keyword argument has a default so that `copy.copy` can clone these errors:
each waiting client gets its own exception object.
"""

from __future__ import annotations

from typing import Any

from jupyter_serve.wire.errors import ServeError

__all__ = ["BatchFailed", "WorkerDied", "WorkerLoadError"]


class WorkerLoadError(ServeError):
    """A worker did not answer `L` with `R(200)` in time; `traceback` is the worker's."""

    def __init__(self, message: str, *, status_code: int = 500, traceback: str = "") -> None:
        super().__init__(message, status_code=status_code)
        self.traceback = traceback


class WorkerDied(ServeError):
    """A worker exited, or was killed for hanging, while it held a batch."""

    def __init__(self, message: str = "Worker died.", *, status_code: int = 500) -> None:
        super().__init__(message, status_code=status_code)


class BatchFailed(ServeError):
    """The worker reported the whole batch as failed (an `E` frame answering `I`)."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int = 503,
        error_type: str = ServeError.error_type,
        traceback: str = "",
        cause: str | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, cause=cause)
        self.error_type = error_type  # type: ignore[misc]  # per instance: the worker's type
        self.traceback = traceback

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> BatchFailed:
        """Build from an `E` frame's header: {"status", "type", "message", "traceback"}
        and, for a handler's exception, its one-line "cause" (worker/failures.py)."""
        return cls(
            str(header.get("message") or "Prediction failed"),
            status_code=int(header.get("status") or 503),
            error_type=str(header.get("type") or ServeError.error_type),
            traceback=str(header.get("traceback") or ""),
            cause=str(header.get("cause") or "") or None,
        )
