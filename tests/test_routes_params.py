"""Tests for jupyter_serve.server.http.params: TorchServe's lenient management-parameter parsing."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_serve.server.http.params import (
    bool_arg,
    check_worker_ceiling,
    int_arg,
    json_args,
    optional_int,
    page_args,
    query_args,
    register_args,
    scale_args,
)
from jupyter_serve.server.models import RegisterParams
from jupyter_serve.wire.errors import BadRequest


def test_query_args_take_the_first_value_of_each_name() -> None:
    assert query_args({"url": [b"a.mar", b"b.mar"], "limit": [b"2"], "none": []}) == {
        "url": "a.mar",
        "limit": "2",
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [("12", 12), ("-3", -3), ("+4", 4), (7, 7), ("", None), (None, None)],
)
def test_integers_parse_as_java_parse_int_and_empty_counts_as_not_given(
    value: Any, expected: Any
) -> None:
    assert optional_int({"n": value}, "n") == expected
    assert int_arg({"n": value}, "n", 99) == (99 if expected is None else expected)


@pytest.mark.parametrize("value", ["dd", "1.5", " 5", "5_0", "nan", "2147483648", "-2147483649"])
def test_a_text_java_cannot_parse_as_an_int_means_not_given(value: str) -> None:
    """TorchServe's `getIntParameter`: what `Integer.parseInt` refuses takes the default."""
    assert optional_int({"n": value}, "n") is None
    assert int_arg({"n": value}, "n", 99) == 99


def test_the_32_bit_bounds_still_parse() -> None:
    assert optional_int({"n": "2147483647"}, "n") == 2**31 - 1
    assert optional_int({"n": "-2147483648"}, "n") == -(2**31)


@pytest.mark.parametrize("value", [True, 2.0, [1], {"a": 1}])
def test_a_json_value_that_is_no_integer_is_a_400_naming_it(value: Any) -> None:
    with pytest.raises(BadRequest, match=r"Invalid value for n: .* \(an integer is expected\)"):
        optional_int({"n": value}, "n")


@pytest.mark.parametrize(
    ("value", "default", "expected"),
    [("true", False, True), ("TRUE", False, True), ("false", True, False), ("-1", True, False),
     ("nan", True, False), ("", True, False), (True, False, True), (False, True, False),
     (None, True, True), (1, False, False)],
)  # fmt: skip
def test_booleans_follow_java_parse_boolean(value: Any, default: bool, expected: bool) -> None:
    assert bool_arg({"b": value}, "b", default) is expected


def test_absent_boolean_takes_the_default() -> None:
    assert bool_arg({}, "synchronous", True) is True
    assert bool_arg({}, "synchronous", False) is False


def test_register_defaults_are_torchserve_defaults() -> None:
    args = register_args({"url": "echo.mar"})
    assert args.url == "echo.mar"
    assert args.synchronous is True
    assert args.params == RegisterParams()


def test_register_reads_every_parameter() -> None:
    args = register_args(
        {"url": "x.mar", "model_name": "m", "handler": "h:fn", "runtime": "python3",
         "batch_size": "4", "max_batch_delay": 250, "initial_workers": "2",
         "response_timeout": "30", "startup_timeout": "0", "synchronous": "false",
         "s3_sse_kms": "false"}
    )  # fmt: skip
    assert args.synchronous is False
    assert args.params == RegisterParams(
        model_name="m", handler="h:fn", runtime="python3", batch_size=4,
        max_batch_delay_ms=250, initial_workers=2, response_timeout=30, startup_timeout=0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value", "field", "expected"),
    [("batch_size", "", "batch_size", None), ("max_batch_delay", "", "max_batch_delay_ms", None),
     ("max_batch_delay", "0", "max_batch_delay_ms", 0),
     ("initial_workers", "", "initial_workers", None),
     ("response_timeout", "0", "response_timeout", None),
     ("response_timeout", "-1", "response_timeout", None),
     ("startup_timeout", "-1", "startup_timeout", None), ("handler", "", "handler", None)],
)  # fmt: skip
def test_register_sentinels_and_empty_values_fall_back_to_defaults(
    name: str, value: str, field: str, expected: Any
) -> None:
    params = register_args({"url": "x.mar", name: value}).params
    assert getattr(params, field) == expected


def test_register_without_url_is_a_bad_request() -> None:
    with pytest.raises(BadRequest, match=r"^Parameter url is required\.$"):
        register_args({"model_name": "m"})


def test_register_keeps_an_empty_url_for_the_registry_to_refuse() -> None:
    assert register_args({"url": ""}).url == ""


@pytest.mark.parametrize("runtime", ["python4", "", "Python"])
def test_register_refuses_unknown_runtimes(runtime: str) -> None:
    with pytest.raises(BadRequest) as caught:
        register_args({"url": "x.mar", "runtime": runtime})
    assert caught.value.message == f"Invalid RuntimeType value: {runtime}"


@pytest.mark.parametrize("runtime", ["python", "python3", "LSP"])
def test_register_accepts_torchserve_runtimes(runtime: str) -> None:
    assert register_args({"url": "x.mar", "runtime": runtime}).params.runtime == runtime


def test_json_args_need_an_object() -> None:
    assert json_args(b'{"url": "x.mar", "batch_size": 2}') == {"url": "x.mar", "batch_size": 2}
    with pytest.raises(BadRequest, match="must be an object"):
        json_args(b'["x.mar"]')
    with pytest.raises(BadRequest, match="Invalid JSON body"):
        json_args(b"{not json")
    with pytest.raises(BadRequest, match="Invalid JSON body"):
        json_args(b"\xff\xfe")


def test_scale_defaults_min_one_max_min_asynchronous() -> None:
    args = scale_args({}, None)
    assert (args.version, args.min_worker, args.max_worker, args.synchronous) == (None, 1, 1, False)
    args = scale_args({"min_worker": "3", "synchronous": "true"}, "2.0")
    assert (args.version, args.min_worker, args.max_worker, args.synchronous) == ("2.0", 3, 3, True)


def test_scale_ignores_timeout_and_gpus_and_junk_counts_and_refuses_negative_ones() -> None:
    args = scale_args({"synchronous": "Nan", "timeout": "0", "number_gpu": "10"}, None)
    assert (args.min_worker, args.max_worker, args.synchronous) == (1, 1, False)
    args = scale_args({"min_worker": "nan", "max_worker": "x"}, None)
    assert (args.min_worker, args.max_worker) == (1, 1)
    with pytest.raises(BadRequest, match=r"Invalid value for min_worker"):
        scale_args({"min_worker": "-3"}, None)


@pytest.mark.parametrize(
    ("args", "message"),
    [({"batch_size": "0"}, "batch_size: 0 \\(at least 1\\)"),
     ({"max_batch_delay": "-1"}, "max_batch_delay"), ({"model_name": ""}, "an empty name")],
)  # fmt: skip
def test_register_refuses_bad_counts_and_an_empty_name(args: dict[str, str], message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        register_args({"url": "echo.mar", **args})


def test_register_takes_junk_numbers_as_not_given_and_negative_workers_as_none() -> None:
    """What TorchServe 0.12 registers for `batch_size=abc&max_batch_delay=1.5&...`."""
    junk = {"batch_size": "abc", "max_batch_delay": "1.5", "response_timeout": "x",
            "startup_timeout": "abc", "initial_workers": "-1"}  # fmt: skip
    params = register_args({"url": "echo.mar", **junk}).params
    assert params.batch_size is None
    assert params.max_batch_delay_ms is None
    assert params.response_timeout is None
    assert params.startup_timeout is None
    assert params.initial_workers == 0


def test_worker_counts_above_the_ceiling_are_refused() -> None:
    check_worker_ceiling(4, min_worker=4, max_worker=None)
    with pytest.raises(BadRequest, match="max_worker: 5 \\(at most 4 workers per model"):
        check_worker_ceiling(4, min_worker=1, max_worker=5)


def test_scale_reads_model_version_from_the_query_only_without_a_path_version() -> None:
    assert scale_args({"model_version": "2.0"}, None).version == "2.0"
    assert scale_args({"model_version": "2.0"}, "1.0").version == "1.0"


@pytest.mark.parametrize(
    ("args", "expected"),
    [({}, (100, 0)), ({"limit": "", "next_page_token": ""}, (100, 0)),
     ({"limit": "1", "next_page_token": "12"}, (1, 12)), ({"limit": "-1"}, (-1, 0))],
)  # fmt: skip
def test_page_args_default_to_100_and_0(args: dict[str, str], expected: tuple[int, int]) -> None:
    assert page_args(args) == expected
