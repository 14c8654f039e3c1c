"""Exceptions into E frames: status by exception type, TorchServe's messages."""

from __future__ import annotations

import sys
import types

import pytest

from jupyter_serve.handlers.exceptions import PredictionException
from jupyter_serve.wire.protocol import Kind
from jupyter_serve.worker.failures import (
    is_out_of_memory,
    load_failure,
    prediction_error_code,
    prediction_failure,
)
from jupyter_serve.worker.outputs import WRONG_LENGTH, InvalidOutput


def raised(exc: BaseException) -> BaseException:
    """`exc` with a traceback, as the service sees it."""
    try:
        raise exc
    except BaseException as caught:
        return caught


class FakeCudaOOM(RuntimeError):
    pass


@pytest.fixture
def fake_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(OutOfMemoryError=FakeCudaOOM)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)


def test_generic_exception_is_503_prediction_failed_with_traceback() -> None:
    failure = prediction_failure(raised(KeyError("x")))
    assert (failure.status, failure.message) == (503, "Prediction failed")
    assert "KeyError: 'x'" in failure.traceback
    frame = failure.frame()
    assert frame.kind is Kind.ERROR
    assert frame.header == {
        "status": 503,
        "type": "InternalServerException",
        "message": "Prediction failed",
        "traceback": failure.traceback,
        "cause": "KeyError: 'x'",
    }


def test_memory_error_is_507() -> None:
    failure = prediction_failure(raised(MemoryError()))
    assert (failure.status, failure.message) == (507, "Out of resources")


def test_cuda_out_of_memory_is_507_by_type(fake_torch: None) -> None:
    assert is_out_of_memory(FakeCudaOOM("whatever text"))
    assert prediction_failure(raised(FakeCudaOOM("x"))).status == 507


def test_the_word_cuda_in_a_message_is_not_out_of_memory(fake_torch: None) -> None:
    assert not is_out_of_memory(RuntimeError("CUDA error: device-side assert"))


def test_memory_error_as_the_cause_counts() -> None:
    outer = RuntimeError("load failed")
    outer.__cause__ = MemoryError()
    assert is_out_of_memory(outer)
    assert load_failure(outer, "summary").status == 507
    assert load_failure(RuntimeError("plain"), "summary").status == 500


def test_our_prediction_exception_sets_status_and_message() -> None:
    failure = prediction_failure(raised(PredictionException("bad input", 599)))
    assert (failure.status, failure.message) == (599, "bad input")


def test_any_prediction_exception_with_an_int_code_counts() -> None:
    class PredictionException(Exception):  # e.g. ts.utils.util's or mms.service's
        def __init__(self, message: str, error_code: int = 500) -> None:
            super().__init__(message)
            self.error_code = error_code

    class Subclass(PredictionException):
        pass

    assert prediction_error_code(PredictionException("m", 404)) == 404
    assert prediction_error_code(Subclass("m", 410)) == 410
    assert prediction_failure(raised(PredictionException("plain", 400))).message == "plain"


def test_other_exceptions_with_error_code_do_not_count() -> None:
    class Other(Exception):
        error_code = 599

    assert prediction_error_code(Other()) is None
    bad = PredictionException("m")
    bad.error_code = "599"  # type: ignore[assignment]
    assert prediction_error_code(bad) is None


def test_invalid_output_keeps_torchserve_message_and_puts_the_detail_in_traceback() -> None:
    failure = prediction_failure(InvalidOutput(WRONG_LENGTH, "returned 1 items for 2"))
    assert (failure.status, failure.message, failure.traceback) == (
        503,
        WRONG_LENGTH,
        "returned 1 items for 2",
    )


def test_load_failure_is_500_with_given_details() -> None:
    failure = load_failure(ValueError("x"), "Loading failed", "the details")
    assert (failure.status, failure.message, failure.traceback) == (
        500,
        "Loading failed",
        "the details",
    )


def test_generic_failure_names_the_exception_as_its_cause_in_one_safe_line() -> None:
    exc = raised(ValueError("bad shape (1x3 and 784x10) token=abc\nsecond line"))
    failure = prediction_failure(exc)
    assert failure.cause == "ValueError: bad shape (1x3 and 784x10) token=[secret]"
    assert failure.frame().header["cause"] == failure.cause
    assert b'"cause": "ValueError: bad shape' in failure.result("r").body


def test_cause_hides_url_passwords_and_is_bounded() -> None:
    cause = prediction_failure(raised(OSError("https://u:pw@h/x " + "y" * 400))).cause
    assert cause.startswith("OSError: https://u:[secret]@h/x y")
    assert len(cause) == 300
