"""The error a register or a synchronous scale raises when its workers fail to start.

TorchServe's "Failed to start workers for model N version: V": a 507
`OutOfResources` when a worker ran out of memory, else a 500 `ServeError`, with
the first failed worker's reason (the last line of its traceback, the handler's
exception) as the answer's `cause`. What the pool reports about a scale
(`ScaleResult`) lives in server/pool/slots.py; when the registry raises this error, and
what it keeps of the workers' output, lives in registry.py.
"""

from __future__ import annotations

from jupyter_serve.server.pool import ScaleResult, WorkerLoadError
from jupyter_serve.wire.errors import OutOfResources, ServeError

__all__ = ["failure_cause", "load_cause", "start_failure"]

CAUSE_LENGTH = 300  # characters of a worker's reason kept in the answer


def start_failure(result: ScaleResult, name: str, version: str) -> ServeError:
    """TorchServe's "Failed to start workers" error for `result`'s failed loads."""
    message = f"Failed to start workers for model {name} version: {version}"
    if any(error.status_code == 507 for error in result.failures):
        return OutOfResources(message, cause=load_cause(result))
    return ServeError(message, cause=load_cause(result))


def load_cause(result: ScaleResult) -> str | None:
    """The first failed worker's reason (`failure_cause`)."""
    return next(filter(None, map(failure_cause, result.failures)), None)


def failure_cause(failure: WorkerLoadError) -> str | None:
    """Why a worker failed to load: its traceback's last line (the handler's exception),
    else its message; the panel shows it on the card of a failing version too."""
    lines = [line.strip() for line in failure.traceback.splitlines() if line.strip()]
    cause = lines[-1] if lines else failure.message
    return cause[:CAUSE_LENGTH] if cause else None
