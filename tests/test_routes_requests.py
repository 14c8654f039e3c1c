"""TorchServe's request parsing: raw body -> "body", form fields -> parameters, headers."""

from __future__ import annotations

import uuid
from urllib.parse import urlencode

from tornado.httputil import (
    HTTPHeaders,
    HTTPServerRequest,
    RequestStartLine,
    parse_body_arguments,
)

from jupyter_serve.server.http.requests import new_request_id, to_inference_request
from jupyter_serve.wire.protocol import Parameter


def http_request(body: bytes, content_type: str, **headers: str) -> HTTPServerRequest:
    all_headers = HTTPHeaders({"Host": "localhost", "Content-Type": content_type, **headers})
    start = RequestStartLine("POST", "/x", "HTTP/1.1")
    request = HTTPServerRequest(start_line=start, headers=all_headers, body=body)
    parse_body_arguments(content_type, body, request.body_arguments, request.files, all_headers)
    return request


def multipart(fields: list[tuple[str, str | None, str, bytes]]) -> tuple[bytes, str]:
    boundary = "BOUNDARY42"
    chunks = []
    for name, filename, content_type, data in fields:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        head = f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
        if content_type:
            head += f"Content-Type: {content_type}\r\n"
        chunks.append(head.encode() + b"\r\n" + data + b"\r\n")
    body = b"".join(chunks) + f"--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def test_raw_body_becomes_the_body_parameter() -> None:
    request = to_inference_request(http_request(b'{"a": 1}', "application/json"), "id-1")
    assert request.request_id == "id-1"
    assert request.parameters == (Parameter("body", "application/json", b'{"a": 1}'),)


def test_empty_body_still_has_a_body_parameter() -> None:
    request = to_inference_request(http_request(b"", "application/octet-stream"), "id")
    assert request.parameters == (Parameter("body", "application/octet-stream", b""),)


def test_multipart_fields_and_files_become_parameters_last_one_wins() -> None:
    body, content_type = multipart(
        [
            ("data", "cat.png", "image/png", b"\x89PNG-1"),
            ("data", "dog.png", "image/png", b"\x89PNG-2"),
            ("threshold", None, "", b"0.5"),
        ]
    )
    request = to_inference_request(http_request(body, content_type), "id")
    assert set(request.parameters) == {
        Parameter("data", "image/png", b"\x89PNG-2"),
        Parameter("threshold", "", b"0.5"),
    }


def test_urlencoded_fields_become_parameters() -> None:
    body = urlencode({"data": "hello", "k": "v"}).encode()
    request = to_inference_request(http_request(body, "application/x-www-form-urlencoded"), "id")
    assert set(request.parameters) == {Parameter("data", "", b"hello"), Parameter("k", "", b"v")}


def test_headers_are_forwarded_with_explain_and_url_path() -> None:
    raw = http_request(b"x", "text/plain", **{"X-Trace": "t1"})
    plain = to_inference_request(raw, "id")
    assert plain.headers["X-Trace"] == "t1"
    assert plain.headers["explain"] == "False"
    assert "url_path" not in plain.headers
    explained = to_inference_request(raw, "id", explain=True, url_path="v1/chat/completion")
    assert explained.headers["explain"] == "True"
    assert explained.headers["url_path"] == "v1/chat/completion"


def test_request_ids_are_unique_version_4_uuid_strings() -> None:
    ids = [new_request_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    for text in ids[::997]:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
