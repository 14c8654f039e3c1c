"""`timed`: TorchServe's `ts.handler_utils.timer.timed` profiling decorator for handler steps.

Decorate a handler method (`preprocess`, `inference`, `postprocess`, or any other)
with it and set `handler: {profile: true}` in the model's `model-config.yaml`:
each call then adds the metric `ts_handler_<method name>` (milliseconds) through
`self.context.metrics`, which reaches the server's `/metrics` like any handler
metric. Without that setting the method runs untimed, at no cost beyond one
dictionary lookup. On a GPU the time is taken with CUDA events, so it covers the
kernels the method queued, not only their launch.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def profiling(handler: Any) -> bool:
    """True when the handler's model-config.yaml asks for `handler: {profile: true}`."""
    config = getattr(getattr(handler, "context", None), "model_yaml_config", None) or {}
    section = config.get("handler") if isinstance(config, dict) else None
    return bool(isinstance(section, dict) and section.get("profile"))


def timed(method: F) -> F:
    """Time `method` into `ts_handler_<name>` (ms) when the model's yaml turns profiling on."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not profiling(self):
            return method(self, *args, **kwargs)
        stop = _start_clock()
        result = method(self, *args, **kwargs)
        self.context.metrics.add_time(f"ts_handler_{method.__name__}", stop())
        return result

    return wrapper  # type: ignore[return-value]


def _start_clock() -> Callable[[], float]:
    """Start timing; the returned function gives the elapsed milliseconds."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()

        def cuda_elapsed() -> float:
            end.record()
            torch.cuda.synchronize()
            return float(start.elapsed_time(end))

        return cuda_elapsed
    began = time.perf_counter()
    return lambda: (time.perf_counter() - began) * 1000
