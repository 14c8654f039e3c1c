"""Tests for the access log's one exception (server/http/access_log.py), without a server."""

from __future__ import annotations

from typing import Any

from jupyter_serve.server.http.access_log import QuietPredictions, quiet_successful_predictions


class Handler:
    def __init__(self, status: int, quiet: bool) -> None:
        self.status, self.quiet_when_ok = status, quiet

    def get_status(self) -> int:
        return self.status


def test_only_successful_predictions_skip_the_log_function_it_wraps_once() -> None:
    logged: list[Any] = []
    settings: dict[str, Any] = {"log_function": logged.append}
    quiet_successful_predictions(settings)
    quiet_successful_predictions(settings)  # a second extension start wraps nothing more
    wrapped = settings["log_function"]
    assert isinstance(wrapped, QuietPredictions)
    assert wrapped.original == logged.append
    cases = [Handler(200, True), Handler(404, True), Handler(200, False), Handler(503, True)]
    for handler in cases:
        wrapped(handler)
    assert logged == cases[1:]  # a prediction's error, any other route, an error again


def test_without_a_log_function_tornados_own_logging_stays() -> None:
    settings: dict[str, Any] = {}
    quiet_successful_predictions(settings)
    assert settings == {}
