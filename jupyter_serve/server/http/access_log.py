"""The access log's one exception: successful predictions are not logged line by line.

jupyter_server writes its access log through tornado's `log_function` application
setting (`jupyter_server.log.log_request`), one line per request. A prediction
server answers thousands of requests a second; their counts and latencies are in
`/metrics`, under TorchServe's names. `quiet_successful_predictions(settings)`
wraps that setting once: a handler whose class says `quiet_when_ok` and that
answered below 400 is not logged; every other request goes to the setting as
before (errors of predictions included).
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

__all__ = ["QuietPredictions", "quiet_successful_predictions"]

LogFunction = Callable[[Any], None]


class QuietPredictions:
    """A `log_function` that skips successful predictions and hands the rest to `original`."""

    def __init__(self, original: LogFunction) -> None:
        self.original = original

    def __call__(self, handler: Any) -> None:
        if getattr(handler, "quiet_when_ok", False) and handler.get_status() < 400:
            return
        self.original(handler)


def quiet_successful_predictions(settings: MutableMapping[str, Any]) -> None:
    """Wrap the app's `log_function` (once); without one, tornado's own logging stays."""
    original = settings.get("log_function")
    if original is not None and not isinstance(original, QuietPredictions):
        settings["log_function"] = QuietPredictions(original)
