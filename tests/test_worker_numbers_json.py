"""`worker.numbers_json`: the exact text of `json.dumps(item, indent=2)` for lists of numbers."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from jupyter_serve.worker.numbers_json import MAX_DEPTH, numbers_json

NUMBERS = st.integers(min_value=-(2**70), max_value=2**70) | st.floats()
NUMBER_LISTS = st.recursive(
    st.lists(NUMBERS, max_size=6), lambda inner: st.lists(inner, max_size=4)
)


@given(NUMBER_LISTS)
def test_lists_of_numbers_get_json_dumps_text_exactly(item: list[Any]) -> None:
    assert numbers_json(item) == json.dumps(item, indent=2)


@given(NUMBER_LISTS, st.sampled_from([True, None, "x", {"a": 1}, (1, 2), 2.5j]))
def test_any_other_leaf_is_left_to_json_dumps(item: list[Any], other: Any) -> None:
    assert numbers_json([*item, [other]]) is None


def test_the_special_floats_are_written_as_json_writes_them() -> None:
    values = [float("nan"), float("inf"), -float("inf"), -0.0, 1e300, 5e-324]
    assert numbers_json(values) == json.dumps(values, indent=2)


def test_what_is_not_a_plain_list_of_numbers_is_left_to_json_dumps() -> None:
    class Number(float):
        pass

    assert numbers_json((1, 2)) is None  # a tuple
    assert numbers_json({"a": [1]}) is None
    assert numbers_json([Number(1.0)]) is None
    deep: list[Any] = [1.0]
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    assert numbers_json(deep) is None
    looped: list[Any] = [1.0]
    looped.append(looped)
    assert numbers_json(looped) is None
