"""KServe v2 inputs as the handler's batch rows, their cost refused before it is paid.

A v2 input reaches the handler as one row whose `data` is nested to the input's
`shape` (worker/kserve.py). Nesting is where a tiny request could cost the most:
`"shape": [4000000, 0]` with no data at all asks for four million empty lists. So,
from the shape and the element count alone (a binary input's byte size, found without
decoding it; a JSON input's leaves), before anything is decoded or nested:

* the shape must describe the data (400): its product is the element count, and a
  tensor without elements nests at most one list in another (a zero dimension with
  more than one outer element cannot describe anything);
* a request's elements, and the lists its shapes nest them in, stay within
  `ServeApp.max_tensor_elements` (413). With every dimension at least 1 a nesting
  level holds no more lists than there are elements, so counting the lists too
  bounds the nesting of any shape by the same number.

The shaped data is then written straight as the JSON text the row carries (exactly
what `json.dumps` writes for the nested lists), a block of about `CHUNK` elements and
lists at a time, so the worker never holds the whole nested tensor besides its text.
A BYTES input passes its first element, as TorchServe's `kservev2` does. A JSON input's
data must be values of its datatype (`check_json_data`, as Triton reads JSON tensors).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

from jupyter_serve.wire.errors import BadRequest, RequestTooLarge
from jupyter_serve.wire.oip import CHUNK, bytes_spans, element_count, flatten, read_elements

__all__ = [
    "MAX_DIMS", "Budget", "Encoded", "check_json_data", "input_row", "nested_lists",
    "tensor_json", "tensor_shape",
]  # fmt: skip

MAX_DIMS = 64  # a v2 tensor's dimensions (numpy allows 64)
MAX_DIM_DIGITS = 19  # a dimension given as a string: int() refuses past 4300 digits

Reader = Callable[[int, int], Sequence[Any]]
"""`read(start, count)`: `count` of a tensor's flattened elements, from the `start`-th on."""


class Encoded(NamedTuple):
    """A row value already encoded as the JSON text the handler's row carries."""

    text: bytes


class Budget:
    """The elements (and nesting lists) a request's inputs may still build."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def take(self, count: int) -> None:
        """Spend `count`; 413 (nothing built yet) when the request would exceed the limit."""
        if count > self.left:
            raise RequestTooLarge(
                f"The request's tensors exceed the limit of {self.limit} elements "
                "(max_tensor_elements)."
            )
        self.left -= count


def input_row(tensor: Any, raw: memoryview | None, budget: Budget) -> dict[str, Any]:
    """A v2 input as the handler's row: its data shaped (as `Encoded` JSON text), a BYTES
    input's first element as is; `raw` is its binary data, if it came as binary."""
    if not isinstance(tensor, dict) or ("data" not in tensor and raw is None):
        raise BadRequest(
            'Each v2 input must be an object with "name", "shape", "datatype", "data".'
        )
    row = dict(tensor)
    shape = tensor_shape(row)
    if row.get("datatype") == "BYTES":
        row["data"] = _first_bytes(row, raw, budget)
    else:
        row["data"] = _shaped(row, raw, shape, budget)
    return row


def _first_bytes(row: dict[str, Any], raw: memoryview | None, budget: Budget) -> Any:
    """A BYTES input's first element (the others are counted, never built)."""
    if raw is None:
        elements = flatten(row["data"])
        _spend_bytes(row, len(elements), budget)
        check_json_data(_name(row), "BYTES", elements)
        return elements[0]
    _spend_bytes(row, element_count("BYTES", raw), budget)
    offset, length = next(bytes_spans(raw))
    return bytes(raw[offset : offset + length])


def _spend_bytes(row: dict[str, Any], count: int, budget: Budget) -> None:
    if not count:
        raise BadRequest(f"Input {_name(row)}: a BYTES tensor without data.")
    budget.take(count)


def _shaped(
    row: dict[str, Any], raw: memoryview | None, shape: list[int], budget: Budget
) -> Encoded:
    """An input's elements nested to its shape, as `Encoded` JSON text."""
    datatype = str(row.get("datatype"))
    if raw is None:
        flat = flatten(row["data"])
        count, read = len(flat), partial(_slice, flat)
    else:
        count, read = element_count(datatype, raw), partial(read_elements, datatype, raw)
    _check_fits(_name(row), shape, count)
    budget.take(1 if not shape else count + nested_lists(shape))
    if raw is None:
        check_json_data(_name(row), datatype, flat)
    return Encoded(tensor_json(read, shape).encode())


class Rule(NamedTuple):
    """What JSON data of a datatype holds: values of these types, within these bounds."""

    types: frozenset[type]
    what: str  # for the error message
    low: int | None = None
    high: int | None = None


def _integers(signed: bool, bits: int) -> Rule:
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return Rule(frozenset({int}), f"integers from {low} to {high}", low, high)


RULES = {
    "BOOL": Rule(frozenset({bool}), "true or false"),
    "BYTES": Rule(frozenset({str}), "strings"),
    **{f"FP{bits}": Rule(frozenset({int, float}), "numbers") for bits in (16, 32, 64)},
    "BF16": Rule(frozenset({int, float}), "numbers"),
    **{f"INT{bits}": _integers(True, bits) for bits in (8, 16, 32, 64)},
    **{f"UINT{bits}": _integers(False, bits) for bits in (8, 16, 32, 64)},
}
"""Triton's reading of a JSON tensor's data: booleans for BOOL, integers in range for the
integer types (no 1.5, no true), numbers for the floating-point ones, strings for BYTES."""


def check_json_data(name: str, datatype: str, flat: list[Any]) -> None:
    """400 unless `datatype` is known and `flat` (a JSON input's elements) are all values of
    it (`RULES`): a pass over the types and one for the bounds, in C."""
    rule = RULES.get(datatype)
    if rule is None:
        raise BadRequest(f"Input {name}: unknown datatype {datatype[:40]!r}.")
    if _fits(rule, flat):
        return
    bad = next(value for value in flat if not _fits(rule, [value]))
    raise BadRequest(
        f"Input {name}: {datatype} data must be {rule.what}, not {json.dumps(bad)[:40]}."
    )


def _fits(rule: Rule, values: list[Any]) -> bool:
    if not set(map(type, values)) <= rule.types:
        return False
    if rule.low is None or rule.high is None or not values:
        return True
    return bool(rule.low <= min(values) and max(values) <= rule.high)


def _slice(flat: list[Any], start: int, count: int) -> list[Any]:
    return flat[start : start + count]


def _name(row: dict[str, Any]) -> str:
    """An input's name for an error message (a caller's text: cut short)."""
    return str(row.get("name"))[:80]


def _check_fits(name: str, shape: list[int], count: int) -> None:
    """400 unless `shape` describes `count` elements (see the module docstring)."""
    if math.prod(shape) != count or (not shape and not count):
        raise BadRequest(f"Input {name}: {count} values do not fit shape {shape}.")
    outer = math.prod(shape[: shape.index(0)]) if 0 in shape else 1
    if outer > 1:
        raise BadRequest(
            f"Input {name}: shape {shape} cannot describe {count} values (a zero dimension "
            "with more than one outer element)."
        )


def nested_lists(shape: Sequence[int]) -> int:
    """How many lists nest a tensor of `shape` (the `[` of its JSON): 1 + d0 + d0*d1 + ..."""
    total, outer = 0, 1
    for dim in shape:
        total += outer
        outer *= dim
        if not outer:
            break
    return total


def tensor_json(read: Reader, shape: Sequence[int]) -> str:
    """`json.dumps` of the first prod(`shape`) elements nested to `shape` (for the scalar
    shape `[]`, of the first element), building about `CHUNK` of them at a time."""
    if not shape:
        return json.dumps(read(0, 1)[0])
    pieces: list[str] = []
    _write(pieces, read, 0, tuple(shape), 0)
    return "".join(pieces)


def _write(pieces: list[str], read: Reader, start: int, shape: tuple[int, ...], depth: int) -> None:
    """The JSON of the sub-tensor of `shape[depth:]` whose first element is `start`: its
    sub-tensors are built and encoded a group of about `CHUNK` elements and lists at a
    time, or written the same way one by one when a single one is larger than that."""
    inner = shape[depth + 1 :]
    step = math.prod(inner)  # elements per sub-tensor
    cost = step + nested_lists(inner) if inner else 1  # objects one sub-tensor builds
    group = max(1, CHUNK // max(cost, 1))
    pieces.append("[")
    for first in range(0, shape[depth], group):
        if first:
            pieces.append(", ")
        if cost > CHUNK:
            _write(pieces, read, start + first * step, shape, depth + 1)
            continue
        count = min(group, shape[depth] - first)
        values = read(start + first * step, count * step)
        block = (
            [_nest(values[i * step : (i + 1) * step], inner) for i in range(count)]
            if inner
            else values
        )
        pieces.append(json.dumps(block)[1:-1])
    pieces.append("]")


def _nest(flat: Sequence[Any], shape: tuple[int, ...]) -> Any:
    """`flat` (one small block) as nested lists of `shape`."""
    if len(shape) == 1:
        return list(flat)
    step = math.prod(shape[1:])
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def tensor_shape(row: dict[str, Any]) -> list[int]:
    """A v2 input's shape: at most `MAX_DIMS` non-negative integers, else 400."""
    shape = row.get("shape") or []
    dims = [_dim(n) for n in shape] if isinstance(shape, list) and len(shape) <= MAX_DIMS else []
    if not isinstance(shape, list) or len(dims) != len(shape) or None in dims:
        raise BadRequest(
            f"Input {_name(row)}: shape must be a list of at most {MAX_DIMS} non-negative integers."
        )
    return [dim for dim in dims if dim is not None]


def _dim(value: Any) -> int | None:
    """One dimension as pydantic's lax int reads it (3, 3.0, "3"); None when it is none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        digits = value.strip()
        if digits.isascii() and digits.isdigit() and len(digits) <= MAX_DIM_DIGITS:
            value = int(digits)
    return value if isinstance(value, int) and value >= 0 else None
