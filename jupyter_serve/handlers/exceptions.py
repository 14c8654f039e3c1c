"""`PredictionException`: how a model handler picks the HTTP status of a failed batch.

Same shape as TorchServe's `ts.utils.util.PredictionException`, so handlers
written for TorchServe keep working: raise `PredictionException(message, code)`
and the client gets `code` (for example 400 or 599) with `message`, instead of
the generic 503 "Prediction failed". The worker recognises it by type.
Standard library only: the worker imports this module without torch.
"""

from __future__ import annotations


class PredictionException(Exception):
    """A handler failure reported to the client with a chosen status code.

    Args:
        message: The text the client sees in the error's `message` field.
        error_code: The HTTP status of the response (TorchServe's default 500).
    """

    def __init__(self, message: str, error_code: int = 500) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = error_code

    def __str__(self) -> str:
        return f"{self.message} : {self.error_code}"

    def __repr__(self) -> str:
        return f"PredictionException({self.message!r}, error_code={self.error_code})"
