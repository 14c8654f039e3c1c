"""The parts of TorchServe's `Context` that the handlers in this package use.

These are structural types (`Protocol`s): the worker's `Context` satisfies them
without importing anything from here, and so does any small fake in tests.
Read-only properties and positional-only parameters keep the match loose, so an
implementation may use plain attributes, wider types or extra optional arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Metrics(Protocol):
    """The metrics cache a handler records into (`context.metrics`)."""

    def add_time(
        self, name: str, value: float, idx: int | None = None, unit: str = "ms", /
    ) -> Any: ...


class HandlerContext(Protocol):
    """What `BaseHandler` and its subclasses read from the per-batch context."""

    @property
    def model_name(self) -> str: ...

    @property
    def manifest(self) -> Mapping[str, Any]: ...

    @property
    def system_properties(self) -> Mapping[str, Any]: ...

    @property
    def model_yaml_config(self) -> Mapping[str, Any] | None: ...

    @property
    def metrics(self) -> Metrics: ...

    def get_request_header(self, idx: int, key: str, /) -> Any: ...
