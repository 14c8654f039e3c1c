"""Open Inference Protocol (KServe v2) tensor helpers, shared by both sides.

Stdlib only: the server's KServe routes (`routes/kserve.py`) and the workers'
`kservev2` request envelope (`handlers/envelopes.py`) both turn handler outputs
into v2 tensors with these.
"""

from __future__ import annotations

import json
from typing import Any


def flatten(value: Any) -> list[Any]:
    """The leaves of nested lists (or tuples), in order; iterative, so any nesting a
    client sends costs time in its size, never a RecursionError."""
    leaves: list[Any] = []
    stack = [iter((value,))]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list | tuple):
                stack.append(iter(item))
                break
            leaves.append(item)
        else:
            stack.pop()
    return leaves


def datatype(values: list[Any]) -> str:
    """The v2 datatype numpy would infer for these values."""
    if any(isinstance(v, str) for v in values):
        return "BYTES"
    if values and all(isinstance(v, bool) for v in values):
        return "BOOL"
    if values and all(isinstance(v, int) for v in values):
        return "INT64"
    return "FP64"


def typed_data(values: list[Any]) -> tuple[str, list[Any]]:
    """(datatype, data) of a tensor's flattened values, as the Open Inference Protocol has
    them: numbers and booleans as they are; anything else (a handler's dicts, None,
    strings) makes a BYTES tensor whose elements are strings (JSON for non-strings)."""
    scalar = all(isinstance(v, int | float) for v in values)
    if scalar:
        return datatype(values), values
    return "BYTES", [v if isinstance(v, str) else json.dumps(v) for v in values]
