"""The serve lane's request-head parser: what it reads as tornado would, what it leaves."""

from __future__ import annotations

import pytest

from jupyter_serve.server.http.lane_http import (
    MAX_HEAD_BYTES,
    LaneHeaders,
    LaneRequest,
    NotForTheLane,
    RequestReader,
    header_case,
)


def parse_head(head: bytes) -> LaneRequest:
    """The request of `head` (without its blank line) read by a fresh reader."""
    return RequestReader().read_head(head + b"\r\n\r\n")


def find_head_end(buffer: bytearray) -> int | None:
    return RequestReader.head_end(buffer)


HEAD = b"POST /serve/predictions/m?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8888\r\n"


def test_a_plain_head_reads_as_tornado_reads_it() -> None:
    request = parse_head(
        HEAD + b"content-TYPE: text/plain\r\nX-a: 1\r\nx-A: 2\r\nContent-Length: 5"
    )
    assert (request.method, request.uri, request.path) == ("POST", "/serve/predictions/m?x=1",
                                                           "/serve/predictions/m")  # fmt: skip
    assert request.content_length == 5
    assert not request.close_after
    assert request.headers.get("content-type") == "text/plain"
    assert request.headers.get("X-A") == "1,2"  # tornado joins a repeated header's values
    assert ("X-A", "2") in request.headers.get_all()
    assert "Content-Length" in request.headers
    assert request.headers.get("Missing", "none") == "none"


def test_connection_close_is_noted() -> None:
    assert parse_head(HEAD + b"Connection: Close").close_after


def test_header_case_is_tornados() -> None:
    assert header_case("x-request-ID") == "X-Request-Id"
    assert LaneHeaders([("Content-Type", "a")]).get("CONTENT-type") == "a"


@pytest.mark.parametrize(
    "head",
    [
        HEAD + b"Transfer-Encoding: chunked",
        HEAD + b"Expect: 100-continue",
        HEAD + b"Upgrade: websocket",
        HEAD + b"Connection: Upgrade",
        HEAD + b"Content-Length: -1",
        HEAD + b"Content-Length: 1,1",
        HEAD + b"Bad Name: x",
        HEAD + b"NoColon",
        HEAD + b"X: a\rb",
        HEAD + b"X: a\x00b",
        HEAD + b" folded: continuation",
        b"POST /serve/predictions/m HTTP/1.0\r\nHost: h",
        b"POST http://h/serve/predictions/m HTTP/1.1\r\nHost: h",
        b"post /serve/predictions/m HTTP/1.1\r\nHost: h",
        HEAD + b"Content-Length: " + b"9" * 3000,
        HEAD + b"Content-Length: 1\r\nContent-Length: 2",
        HEAD + b"Content-Length: 1\r\nTransfer-Encoding: chunked",
        HEAD + b"X: caf\xc3\xa9\r\nX\xc3\xa9: 1",
        b"GET /serve/predictions/m HTTP/1.1\nHost: h",
        b"POST /serve/predictions/m HTTP/1.1\r\nContent-Length: 0",  # no Host
    ],
)
def test_heads_the_lane_leaves_to_tornado(head: bytes) -> None:
    with pytest.raises(NotForTheLane):
        parse_head(head)


def test_the_head_ends_at_the_first_blank_line() -> None:
    assert find_head_end(bytearray(b"GET / HTTP/1.1\r\nHost: h\r\n")) is None
    assert find_head_end(bytearray(b"GET / HTTP/1.1\r\nHost: h\r\n\r\nbody\n\n")) == 27


@pytest.mark.parametrize(
    "head",
    [b"GET / HTTP/1.1\nHost: h\n\n\r\n\r\n", b"GET / HTTP/1.1\r\nHost: h\n\r\n\r\n"],
)
def test_bare_line_feeds_go_to_tornado(head: bytes) -> None:
    with pytest.raises(NotForTheLane):
        RequestReader().read_head(head)


def test_a_huge_head_goes_to_tornado() -> None:
    with pytest.raises(NotForTheLane):
        find_head_end(bytearray(b"x" * (MAX_HEAD_BYTES + 1)))


def test_a_reader_takes_pipelined_requests_one_at_a_time() -> None:
    reader = RequestReader()
    first = reader.read_head(HEAD + b"Content-Length: 3\r\n\r\n")
    assert first.content_length == 3
    reader.read_body(memoryview(b"abc"))
    second = reader.read_head(b"GET /serve/predictions/n HTTP/1.1\r\nHost: h\r\n\r\n")
    assert (second.method, second.path, second.content_length) == ("GET", "/serve/predictions/n", 0)


def test_a_body_llhttp_frames_otherwise_goes_to_tornado() -> None:
    reader = RequestReader()
    reader.read_head(HEAD + b"Content-Length: 3\r\n\r\n")
    with pytest.raises(NotForTheLane):
        reader.read_body(memoryview(b"ab"))


def test_form_bodies_are_parsed_with_tornados_parser() -> None:
    boundary = "b0und"
    request = parse_head(HEAD + f"Content-Type: multipart/form-data; boundary={boundary}".encode())
    request.body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="data"; filename="a.bin"\r\n'
        f"Content-Type: application/x-raw\r\n\r\nRAW\r\n"
        f'--{boundary}\r\nContent-Disposition: form-data; name="k"\r\n\r\nv\r\n--{boundary}--\r\n'
    ).encode()
    assert request.body_arguments == {"k": [b"v"]}
    upload = request.files["data"][0]
    assert (upload.filename, upload.body) == ("a.bin", b"RAW")
    assert upload.content_type == "application/x-raw"


def test_a_plain_body_has_no_form_fields() -> None:
    request = parse_head(HEAD + b"Content-Type: application/json")
    request.body = b'{"a": 1}'
    assert request.body_arguments == {}
    assert request.files == {}
