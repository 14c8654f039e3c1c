"""HTTP/1.1 request heads for the serve lane: parsed strictly, or left to tornado.

The lane (`lane.py`) answers prediction requests before tornado's HTTP layer
sees them. It only takes requests it can read exactly as tornado would, so this
parser is deliberately narrow: an `HTTP/1.1` request line in origin form, a
`Host`, well-formed header fields, a plain `Content-Length` body (no
`Transfer-Encoding`, no `Expect`, no `Upgrade`). For anything else
`parse_head` answers None and the connection goes to tornado with the bytes
unread, so odd or malformed requests get tornado's own answers (400s included).

`LaneRequest` offers what the prediction exchange reads from a tornado
`HTTPServerRequest` (method, uri, version, headers with tornado's `Http-Header-Case`
names, body, form fields) without building one: tornado's strict header parsing
alone costs about 13 us per request, this about 2 us.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from tornado import httputil

MAX_HEAD_BYTES = 65536  # tornado's default max_header_size
_REQUEST_LINE = re.compile(r"([A-Z]+) (/[!-~]*) HTTP/1\.1")
_FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FORBIDDEN = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_HOST = re.compile(r"(?:[A-Za-z0-9.\-_~]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]*)?")
_REFUSED = frozenset({"Transfer-Encoding", "Expect", "Upgrade"})
FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")


@lru_cache(maxsize=512)
def header_case(name: str) -> str:
    """A header name in tornado's `Http-Header-Case` (`content-TYPE` -> `Content-Type`)."""
    return "-".join(word.capitalize() for word in name.split("-"))


class LaneHeaders:
    """Read-only request headers answering `get` and `get_all` as tornado's `HTTPHeaders`.

    A repeated header's `get` joins its values with commas; `get_all` yields each.
    """

    __slots__ = ("_items", "_joined")

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        joined: dict[str, str] = {}
        for name, value in items:
            joined[name] = f"{joined[name]},{value}" if name in joined else value
        self._joined = joined

    def get(self, name: str, default: Any = None) -> Any:
        return self._joined.get(header_case(name), default)

    def get_all(self) -> list[tuple[str, str]]:
        return self._items

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and header_case(name) in self._joined


@dataclass(eq=False)
class LaneRequest:
    """One request read by the lane (the attributes the prediction exchange uses)."""

    method: str
    uri: str
    headers: LaneHeaders
    content_length: int
    close_after: bool  # the client sent `Connection: close`
    body: bytes | bytearray = b""
    connection: Any = None
    version: str = "HTTP/1.1"
    _form: tuple[dict[str, list[bytes]], dict[str, list[httputil.HTTPFile]]] | None = field(
        default=None, repr=False
    )

    @property
    def path(self) -> str:
        return self.uri.split("?", 1)[0]

    @property
    def body_arguments(self) -> dict[str, list[bytes]]:
        return self._parsed_form()[0]

    @property
    def files(self) -> dict[str, list[httputil.HTTPFile]]:
        return self._parsed_form()[1]

    def _parsed_form(
        self,
    ) -> tuple[dict[str, list[bytes]], dict[str, list[httputil.HTTPFile]]]:
        """Form fields and files, parsed by tornado's own function on first use."""
        if self._form is None:
            arguments: dict[str, list[bytes]] = {}
            files: dict[str, list[httputil.HTTPFile]] = {}
            content_type = self.headers.get("Content-Type", "")
            if content_type.split(";", 1)[0].strip().lower() in FORM_TYPES:
                httputil.parse_body_arguments(
                    content_type,
                    bytes(self.body),
                    arguments,
                    files,
                    self.headers,  # type: ignore[arg-type]
                )
            self._form = (arguments, files)
        return self._form


def find_head_end(buffer: bytearray) -> tuple[int, int] | None:
    """Where the head ends and the body starts, or None while the head is incomplete.

    Raises `NotForTheLane` when the head ends with bare line feeds (tornado accepts
    them; the lane does not) or grows past `MAX_HEAD_BYTES`.
    """
    end = buffer.find(b"\r\n\r\n")
    limit = end + 2 if end >= 0 else len(buffer)  # a terminator starting before `end`
    if buffer.find(b"\n\n", 0, limit) >= 0 or buffer.find(b"\n\r\n", 0, limit) >= 0:
        raise NotForTheLane("bare line feeds")
    if end < 0:
        if len(buffer) > MAX_HEAD_BYTES:
            raise NotForTheLane("head too large")
        return None
    return end, end + 4


class NotForTheLane(Exception):
    """This request (and its connection from here on) goes to tornado."""


def parse_head(head: bytes) -> LaneRequest:
    """The request of this head (without its final blank line), or `NotForTheLane`."""
    if _FORBIDDEN.search(head):
        raise NotForTheLane("control characters")
    lines = head.decode("latin-1").split("\r\n")
    start = _REQUEST_LINE.fullmatch(lines[0])
    if start is None:
        raise NotForTheLane("request line")
    items = [_field(line) for line in lines[1:]]
    headers = LaneHeaders(items)
    if any(name in _REFUSED for name, _ in items):
        raise NotForTheLane("transfer coding, expectation or upgrade")
    if not _HOST.fullmatch(headers.get("Host", "")):
        raise NotForTheLane("host")
    connection = headers.get("Connection", "").lower()
    if connection not in ("", "keep-alive", "close"):
        raise NotForTheLane("connection options")
    return LaneRequest(
        method=start.group(1),
        uri=start.group(2),
        headers=headers,
        content_length=_content_length(headers),
        close_after=connection == "close",
    )


def _field(line: str) -> tuple[str, str]:
    name, colon, value = line.partition(":")
    if not colon or not _FIELD_NAME.fullmatch(name) or "\r" in value or "\n" in value:
        raise NotForTheLane("header field")
    return header_case(name), value.strip(" \t")


def _content_length(headers: LaneHeaders) -> int:
    announced = headers.get("Content-Length")
    if announced is None:
        return 0
    if not announced.isdigit() or not announced.isascii():
        raise NotForTheLane("content length")
    return int(announced)
