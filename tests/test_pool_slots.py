"""`pool.slots`: what one `scale` call reports, and the restart backoff TorchServe uses."""

from __future__ import annotations

from jupyter_serve.server.pool.errors import WorkerLoadError
from jupyter_serve.server.pool.slots import BACKOFF, ScaleResult


def test_a_scale_without_failures_is_ok_and_has_no_messages() -> None:
    result = ScaleResult(target=2, started=2)
    assert result.ok
    assert result.messages == []


def test_a_scale_with_failed_loads_reports_each_message_in_order() -> None:
    failures = (WorkerLoadError("first worker failed"), WorkerLoadError("second worker failed"))
    result = ScaleResult(target=2, failures=failures)
    assert not result.ok
    assert result.messages == ["first worker failed", "second worker failed"]


def test_backoff_is_torchserves_fibonacci_seconds() -> None:
    assert BACKOFF[:3] == (0, 1, 1)
    assert all(BACKOFF[i] == BACKOFF[i - 1] + BACKOFF[i - 2] for i in range(3, len(BACKOFF)))
    assert BACKOFF[-1] == 1597
