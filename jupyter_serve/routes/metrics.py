"""The metrics route: Prometheus text with TorchServe's metric names."""

from __future__ import annotations

from typing import Any

ROUTES: list[tuple[str, type[Any]]] = []
