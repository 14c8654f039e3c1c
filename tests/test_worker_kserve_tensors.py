"""Tests for the worker's v2 tensor shaping: the JSON of the nested lists, a block at a time."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from jupyter_serve.wire.errors import BadRequest
from jupyter_serve.worker.kserve_tensors import check_json_data, nested_lists, tensor_json


@pytest.mark.parametrize(
    "shape",
    [[], [5], [0], [40000], [3, 20000], [20000, 1, 1], [2, 3, 4], [1, 0, 5], [8193, 2],
     [1] * 63 + [3], [3] + [1] * 63, [2] * 12],
)  # fmt: skip
def test_shaped_data_is_the_json_of_the_nested_lists_the_handler_always_got(
    shape: list[int],
) -> None:
    flat = [n % 7 / 2 if n % 3 else n for n in range(max(math.prod(shape), 1))]

    def nest(values: list[Any], dims: list[int]) -> Any:
        if len(dims) <= 1:
            return values[: dims[0]] if dims else values[0]
        step = math.prod(dims[1:])
        return [nest(values[i * step : (i + 1) * step], dims[1:]) for i in range(dims[0])]

    read = lambda start, count: flat[start : start + count]  # noqa: E731
    assert tensor_json(read, shape) == json.dumps(nest(flat, shape))


def test_nested_lists_counts_the_brackets_of_a_shape() -> None:
    assert [nested_lists(s) for s in ([3], [2, 3], [2, 3, 4], [1, 0, 5], [])] == [1, 3, 9, 2, 0]


@pytest.mark.parametrize(
    ("datatype", "good", "bad"),
    [
        ("BOOL", [True, False], [True, 1]),
        ("INT8", [-128, 127], [128]),
        ("INT64", [-(2**63), 2**63 - 1], [2**63]),
        ("UINT8", [0, 255], [-1]),
        ("UINT64", [0, 2**64 - 1], [2**64]),
        ("INT32", [1, 2], [1, 2.0]),
        ("INT16", [1], [False]),
        ("FP16", [1, 2.5], ["2.5"]),
        ("BF16", [0.5], [None]),
        ("FP64", [], [{"a": 1}]),
        ("BYTES", ["a", ""], ["a", 1]),
    ],
)
def test_json_data_must_be_values_of_its_datatype(
    datatype: str, good: list[Any], bad: list[Any]
) -> None:
    check_json_data("x", datatype, good)
    with pytest.raises(BadRequest, match=f"Input x: {datatype} data must be"):
        check_json_data("x", datatype, bad)


def test_json_data_of_an_unknown_datatype_is_refused() -> None:
    with pytest.raises(BadRequest, match="unknown datatype 'FP99'"):
        check_json_data("x", "FP99", [1])
