"""Management routes: list, register, describe, scale, unregister, set-default."""

from __future__ import annotations

from typing import Any

ROUTES: list[tuple[str, type[Any]]] = []
