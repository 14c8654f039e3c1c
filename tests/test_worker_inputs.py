"""Wire requests into TorchServe's batch input: value decoding and request headers."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_serve.protocol import InferenceRequest, Parameter
from jupyter_serve.worker.inputs import (
    build_batch,
    decode_value,
    request_headers,
    split_content_type,
)


@pytest.mark.parametrize(
    ("content_type", "raw", "expected"),
    [
        ("application/json", b'{"a": 1}', {"a": 1}),
        ("Application/JSON; charset=UTF-8", b"[true]", [True]),
        ("application/json; charset=utf-16", '"x"'.encode("utf-16"), "x"),
        ("application/json", b"nope", bytearray(b"nope")),
        ("text/plain", b"caf\xc3\xa9", "caf\u00e9"),
        ("text/plain; charset=bogus-codec", b"abc", "abc"),
        ("text/html", b"\xc3\x28", bytearray(b"\xc3\x28")),
        ("application/octet-stream", b"\x00", bytearray(b"\x00")),
        ("application/x-www-form-urlencoded", b"a=1", bytearray(b"a=1")),
    ],
)
def test_decode_value_by_content_type(content_type: str, raw: bytes, expected: Any) -> None:
    value = decode_value(Parameter("body", content_type, raw))
    assert value == expected
    assert type(value) is type(expected)


def test_without_decoding_everything_is_a_bytearray() -> None:
    value = decode_value(Parameter("body", "application/json", b"{}"), decode=False)
    assert (type(value), value) == (bytearray, bytearray(b"{}"))


def test_split_content_type_normalises_media_type_and_charset() -> None:
    assert split_content_type(' Text/CSV ; foo=bar; charset="latin-1"') == (
        "text/csv",
        "iso8859-1",
    )
    assert split_content_type("") == ("", None)


def test_headers_add_parameter_content_types_after_http_headers() -> None:
    req = InferenceRequest(
        "r",
        {"explain": "True", "data": "overridden"},
        (Parameter("data", "image/png", b""), Parameter("meta", "text/plain", b"")),
    )
    assert request_headers(req) == {
        "explain": "True",
        "data": {"content-type": "image/png"},
        "meta": {"content-type": "text/plain"},
    }
    assert request_headers(req, "describe")["describe"] == "True"


def test_build_batch_keeps_request_order_and_repeated_fields_collapse_to_the_last() -> None:
    first = InferenceRequest(
        "a", {}, (Parameter("f", "text/plain", b"1"), Parameter("f", "text/plain", b"2"))
    )
    second = InferenceRequest("b", {"h": "v"}, ())
    batch = build_batch([first, second])
    assert batch.data == [{"f": "2"}, {}]
    assert batch.request_ids == ["a", "b"]
    assert batch.headers == [{"f": {"content-type": "text/plain"}}, {"h": "v"}]
