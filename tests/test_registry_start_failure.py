"""`registry.start_failure`: TorchServe's error when a model's workers fail to start."""

from __future__ import annotations

from jupyter_serve.server.pool import ScaleResult
from jupyter_serve.server.pool.errors import WorkerLoadError
from jupyter_serve.server.registry.start_failure import start_failure
from jupyter_serve.wire.errors import OutOfResources

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "handler.py", line 3, in initialize\n'
    "RuntimeError: cannot load\n\n"
)


def test_the_cause_is_the_first_failed_workers_last_traceback_line() -> None:
    failures = (
        WorkerLoadError("Worker exited", traceback=TRACEBACK),
        WorkerLoadError("Worker exited", traceback="ValueError: second worker\n"),
    )
    error = start_failure(ScaleResult(target=2, failures=failures), "echo", "1.0")
    assert not isinstance(error, OutOfResources)
    assert error.to_json() == {
        "code": 500,
        "type": "InternalServerException",
        "message": "Failed to start workers for model echo version: 1.0",
        "cause": "RuntimeError: cannot load",
    }


def test_a_worker_out_of_memory_makes_it_torchserves_507() -> None:
    failures = (
        WorkerLoadError("Load timed out"),
        WorkerLoadError("MemoryError: no room", status_code=507),
    )
    error = start_failure(ScaleResult(target=2, failures=failures), "big", "null")
    assert isinstance(error, OutOfResources)
    assert (error.status_code, error.message) == (
        507,
        "Failed to start workers for model big version: null",
    )
    assert error.cause == "Load timed out"  # no traceback: the first worker's message


def test_failures_without_any_reason_have_no_cause() -> None:
    error = start_failure(ScaleResult(target=1, failures=(WorkerLoadError(""),)), "m", "1")
    assert "cause" not in error.to_json()
