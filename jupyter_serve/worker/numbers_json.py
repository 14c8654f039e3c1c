"""``json.dumps(item, indent=2)`` for lists of numbers, without the pure-Python encoder.

TorchServe answers a handler's list or dict output with ``json.dumps(item, indent=2)``,
and with an indent Python's json module falls back to its pure-Python encoder: one
generator step per number. Model outputs are mostly lists of numbers (logits,
probabilities, embeddings, nested per row), so `numbers_json` writes exactly the
same text for a list, nested to any depth up to `MAX_DEPTH`, whose leaves are all
`int` or `float` (not `bool`, not a subclass): `int.__repr__` and `float.__repr__`,
and json's `NaN`, `Infinity` and `-Infinity`. For anything else it returns None and
the caller uses `json.dumps`, which also raises for what it cannot encode.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_DEPTH", "numbers_json"]

MAX_DEPTH = 32  # deeper (or self-containing) lists are left to json.dumps


def numbers_json(item: Any) -> str | None:
    """`json.dumps(item, indent=2)` when `item` is a list of numbers (see the module), else None."""
    if type(item) is not list:
        return None
    return _list(item, 0)


def _list(values: list[Any], depth: int) -> str | None:
    if not values:
        return "[]"
    if depth >= MAX_DEPTH:
        return None
    parts = []
    for value in values:
        kind = type(value)
        if kind is float:
            parts.append(_float(value))
        elif kind is int:
            parts.append(int.__repr__(value))
        elif kind is list:
            nested = _list(value, depth + 1)
            if nested is None:
                return None
            parts.append(nested)
        else:
            return None
    inner = "\n" + "  " * (depth + 1)
    return "[" + inner + ("," + inner).join(parts) + "\n" + "  " * depth + "]"


def _float(value: float) -> str:
    if math.isfinite(value):
        return float.__repr__(value)
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"
