"""Wire requests into TorchServe's batch input: value decoding, request headers, and
requests rejected on their own (a fuzz test: nothing a request holds escapes as an exception)."""

from __future__ import annotations

import encodings.aliases
import json
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult, Parameter
from jupyter_serve.worker.inputs import (
    TOO_DEEP,
    UNDECODABLE,
    InvalidInput,
    build_batch,
    decode_value,
    request_headers,
    split_content_type,
)

DEEP = b"[" * 100_000  # past any recursion limit, wherever json.loads is called from


@pytest.mark.parametrize(
    ("content_type", "raw", "expected"),
    [
        ("application/json", b'{"a": 1}', {"a": 1}),
        ("Application/JSON; charset=UTF-8", b"[true]", [True]),
        ("application/json; charset=utf-16", '"x"'.encode("utf-16"), "x"),
        ("application/json", b"nope", bytearray(b"nope")),
        ("text/plain", b"caf\xc3\xa9", "caf\u00e9"),
        ("text/plain; charset=bogus-codec", b"abc", "abc"),
        ("text/plain; charset=zlib", zlib.compress(b"abc"), bytearray(zlib.compress(b"abc"))),
        ("text/plain; charset=base64", b"YWJj", "YWJj"),
        ("text/plain; charset=rot13", b"abc", "abc"),
        ("application/json; charset=hex", b"[1]", [1]),
        ("application/json; charset=zlib", zlib.compress(b"[1]"), bytearray(zlib.compress(b"[1]"))),
        ("text/plain; charset=punycode", b".", "."),  # Python's own codecs: not charsets
        ("text/plain; charset=idna", b"xn--", "xn--"),
        ("text/plain; charset=unicode-escape", b"\\^", "\\^"),  # it would warn here
        ("application/json; charset=punycode", b".", bytearray(b".")),
        ("application/json", b"1" * 5000, bytearray(b"1" * 5000)),  # past int's digit limit
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


@pytest.mark.parametrize(
    "name",
    [
        "zlib",
        "base64",
        "hex",
        "rot13",
        "bz2",
        "uu",
        "a\x00b",
        "",
        "unicode_escape",
        "raw-unicode-escape",
        "punycode",
        "idna",
    ],
)
def test_only_text_encodings_count_as_a_charset(name: str) -> None:
    assert split_content_type(f"text/plain; charset={name}") == ("text/plain", None)


def test_json_that_nests_too_deeply_is_invalid_input() -> None:
    with pytest.raises(InvalidInput) as caught:
        decode_value(Parameter("data", "application/json", DEEP))
    assert caught.value.status_code == 400
    assert caught.value.message == f"{TOO_DEEP} (input 'data')"
    assert decode_value(Parameter("data", "application/octet-stream", DEEP)) == DEEP
    assert decode_value(Parameter("data", "text/plain", DEEP)) == DEEP.decode()


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


def ok(request_id: str, body: bytes = b"[1]") -> InferenceRequest:
    return InferenceRequest(
        request_id, {"h": request_id}, (Parameter("body", "application/json", body),)
    )


def error_body(result: InferenceResult) -> Any:
    assert (result.status, result.content_type) == (400, "application/json")
    return json.loads(result.body)


def test_a_request_that_cannot_be_decoded_is_rejected_alone() -> None:
    batch = build_batch([ok("a"), ok("deep", DEEP), ok("c", b'{"x": 2}')])
    assert batch.data == [{"body": [1]}, {"body": {"x": 2}}]
    assert batch.request_ids == ["a", "c"]
    assert [h["h"] for h in batch.headers] == ["a", "c"]
    [rejected] = batch.rejected.values()
    assert list(batch.rejected) == [1]
    assert rejected.request_id == "deep"
    assert error_body(rejected) == {
        "code": 400,
        "type": "BadRequestException",
        "message": f"{TOO_DEEP} (input 'body')",
    }


def test_answers_put_the_rejections_back_in_wire_order() -> None:
    batch = build_batch([ok("bad1", DEEP), ok("a"), ok("bad2", DEEP), ok("b")])
    answers = batch.answers([InferenceResult("a", body=b"A"), InferenceResult("b", body=b"B")])
    assert [(r.request_id, r.status) for r in answers] == [
        ("bad1", 400), ("a", 200), ("bad2", 400), ("b", 200),
    ]  # fmt: skip


def test_an_unforeseen_failure_is_the_requests_400_with_its_reason(
    capfd: pytest.CaptureFixture[str],
) -> None:
    broken = InferenceRequest("odd", {}, (Parameter("body", None, b"x"),))  # type: ignore[arg-type]
    batch = build_batch([broken, ok("a")])
    assert batch.request_ids == ["a"]
    message = error_body(batch.rejected[0])["message"]
    assert message.startswith(f"{UNDECODABLE} (AttributeError: ")
    assert "\n" not in message
    logged = capfd.readouterr().err
    assert "Request odd rejected" in logged
    assert "Traceback" in logged


# ---- fuzz: whatever the requests hold, every one is decoded or rejected alone ----------

CODECS = sorted({*encodings.aliases.aliases, *encodings.aliases.aliases.values()})
ODD_CODECS = ["zlib", "base64", "hex", "rot13", "bz2", "uu", "quopri", "punycode", "idna",
              "utf-7", "unicode_escape", "raw_unicode_escape", "a\x00b", "", "bogus"]  # fmt: skip
MEDIA = ["application/json", "Application/JSON", "text/plain", "text/csv", "text/html",
         "application/octet-stream", "image/png", ""]  # fmt: skip


@pytest.mark.parametrize("media", ["text/plain", "application/json"])
def test_every_codec_python_names_decodes_or_falls_back_to_raw_bytes(media: str) -> None:
    samples = [b"", b".", b"xn--", b"\\", b"\xff\xfe\x00", b'["a", 1]', "\u00e9".encode()]
    decoded = str if media == "text/plain" else list
    for name in [*CODECS, *ODD_CODECS]:
        for raw in samples:
            value = decode_value(Parameter("body", f"{media}; charset={name}", raw))
            assert isinstance(value, (bytearray, decoded)), (name, raw)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@st.composite
def charsets(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(CODECS) | st.sampled_from(ODD_CODECS) | st.text(max_size=12))
    return draw(st.sampled_from([name, f'"{name}"', name.upper()]))


@st.composite
def content_types(draw: st.DrawFn) -> str:
    media = draw(st.sampled_from(MEDIA) if draw(st.booleans()) else st.text(max_size=20))
    if draw(st.integers(0, 2)) == 0:
        return f"{media}; charset={draw(charsets())}"
    return media + draw(st.sampled_from(["", ";", "; charset", "; q=1; charset=utf-8"]))


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    depth = st.integers(0, 3000) | st.sampled_from([2000, 100_000])
    closed = st.sampled_from([1, 2])  # balanced, or cut off halfway
    nested = st.tuples(depth, closed).map(lambda d: b"[" * d[0] + b"]" * (d[0] // d[1]))
    as_json = json_values.map(lambda value: json.dumps(value).encode())
    return draw(st.binary(max_size=64) | as_json | nested | st.text().map(str.encode))


parameters = st.builds(Parameter, st.text(max_size=8), content_types(), bodies())
requests = st.builds(
    InferenceRequest,
    st.text(max_size=8),
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
    st.lists(parameters, max_size=3).map(tuple),
)


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(
    batch=st.lists(requests, min_size=1, max_size=4),
    command=st.sampled_from(["predict", "describe"]),
    decode=st.booleans(),
)
def test_every_request_is_decoded_or_rejected_alone(
    batch: list[InferenceRequest], command: str, decode: bool
) -> None:
    built = build_batch(batch, command, decode)
    accepted = [r for i, r in enumerate(batch) if i not in built.rejected]
    assert built.request_ids == [r.request_id for r in accepted]
    assert built.headers == [request_headers(r, command) for r in accepted]
    assert len(built.data) == len(accepted)
    for request, row in zip(accepted, built.data, strict=True):
        last = {p.name: p for p in request.parameters}  # a repeated name keeps the last
        assert row.keys() == last.keys()
        for name, value in row.items():
            assert_decoded(last[name], value, decode)
    for idx, result in built.rejected.items():
        event("rejected")
        assert decode
        assert result.request_id == batch[idx].request_id
        assert_too_deep(batch[idx], error_body(result))
    answers = built.answers([InferenceResult(r.request_id) for r in accepted])
    assert [a.request_id for a in answers] == [r.request_id for r in batch]


def assert_decoded(parameter: Parameter, value: Any, decode: bool) -> None:
    """Raw bytes (always so undecoded, and for media that is neither JSON nor text), a
    str for text, JSON values for JSON."""
    media, charset = split_content_type(parameter.content_type)
    kind = "json" if media == "application/json" else "text" if media[:5] == "text/" else "other"
    event(f"{type(value).__name__} from {kind}")
    if isinstance(value, bytearray):
        assert value == parameter.value
        return
    assert decode
    text = parameter.value.decode(charset or "utf-8")
    if media.startswith("text/"):
        assert value == text
    else:
        assert media == "application/json"
        assert json.dumps(value) == json.dumps(json.loads(text))  # NaN-proof equality


def assert_too_deep(request: InferenceRequest, error: dict[str, Any]) -> None:
    """Nothing but JSON nesting too deeply gets a request rejected."""
    assert (error["code"], error["type"]) == (400, "BadRequestException")
    assert error["message"].startswith(TOO_DEEP)
    media = {split_content_type(p.content_type)[0] for p in request.parameters}
    assert "application/json" in media
