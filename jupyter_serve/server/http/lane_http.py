"""HTTP/1.1 requests for the serve lane, parsed by httptools (llhttp), or left to tornado.

The lane (`lane.py`) answers prediction requests before tornado's HTTP layer sees
them. It only takes requests that llhttp (the parser behind Node.js and uvicorn)
parses without complaint and that it can read exactly as tornado would: an
`HTTP/1.1` request whose head ends at its first blank line, a CRLF CRLF (a head
ending with a bare LF goes to tornado at once, which reads it), and whose
body is framed by `Content-Length` (no `Transfer-Encoding`, no `Expect`, no
`Upgrade`; llhttp's strict defaults already refuse control characters, bare CR or LF
and folded lines). `RequestReader` feeds llhttp
the head and then the body of one request at a time and checks that llhttp saw the
same message boundaries; a parse error or any disagreement raises `NotForTheLane`,
and the connection goes to tornado with the request's bytes unread, so odd,
malformed or hostile requests get tornado's own answers (400s included).

`LaneRequest` offers what the prediction exchange reads from a tornado
`HTTPServerRequest` (method, uri, version, headers with tornado's `Http-Header-Case`
names, body, form fields) without building one.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import httptools
from tornado import httputil

MAX_HEAD_BYTES = 65536  # tornado's default max_header_size
_HEAD_END = re.compile(rb"\r?\n\r?\n")  # where tornado's HTTP/1 reader ends a head
_REFUSED = frozenset({"Transfer-Encoding", "Expect", "Upgrade"})
FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")


def is_form(content_type: str) -> bool:
    """Whether a body of this type is parsed into form fields (`body_arguments`, `files`).

    Tornado parses any body whose type merely starts with a form type (its
    `httputil.parse_body_arguments`), and jupyter_server then reads a `token` field from
    it: such a body is a form here too, so that the handler never gets it raw.
    """
    return content_type.startswith(FORM_TYPES) or (
        content_type.split(";", 1)[0].strip().lower() in FORM_TYPES
    )


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
    body: bytes | bytearray | memoryview = b""  # a view of the buffer it was read into
    connection: Any = None
    version: str = "HTTP/1.1"
    _form: tuple[dict[str, list[bytes]], dict[str, list[httputil.HTTPFile]]] | None = field(
        default=None, repr=False
    )
    malformed_form: bool = False  # tornado refuses its form body (its route answers 400)

    @property
    def path(self) -> str:
        return self.uri.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.uri.partition("?")[2]

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
            if is_form(content_type):
                try:
                    httputil.parse_body_arguments(
                        content_type,
                        bytes(self.body),
                        arguments,
                        files,
                        self.headers,  # type: ignore[arg-type]
                    )
                except httputil.HTTPInputError:  # the lane hands it to tornado's route
                    arguments, files = {}, {}
                    self.malformed_form = True
            self._form = (arguments, files)
        return self._form


class NotForTheLane(Exception):
    """This request (and its connection from here on) goes to tornado."""


class HeadTooLarge(NotForTheLane):
    """No head within `MAX_HEAD_BYTES`: tornado would close the connection, and so does the
    lane (handed over, tornado would wait on the socket for bytes the lane already read)."""


class AskHub(Exception):
    """A request the lane may answer once the hub has said who its token is."""

    def __init__(self, answered: asyncio.Future[None]) -> None:
        super().__init__("a hub token with no fresh verdict")
        self.answered = answered


class RequestReader:
    """Reads a connection's requests one at a time with one llhttp parser.

    `head_end(buffer)` finds where the next head ends; `read_head(head)` parses it
    into a `LaneRequest`; `read_body(body)` feeds its `Content-Length` bytes. Both
    raise `NotForTheLane` on a parse error or when llhttp's idea of the message's
    extent differs from the lane's, after which the reader is not used again.
    """

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.items: list[tuple[bytes, bytes]] = []
        self.begun = 0
        self.head_done = False
        self.body_seen = 0
        self.complete = False

    # ---- httptools callbacks ----

    def on_message_begin(self) -> None:
        self.begun += 1

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.items.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.body_seen += len(body)

    def on_message_complete(self) -> None:
        self.complete = True

    # ---- reading ----

    @staticmethod
    def head_end(buffer: bytearray) -> int | None:
        """The length of the head at the start of `buffer` (its blank line included), or
        None while it is incomplete; `HeadTooLarge` past `MAX_HEAD_BYTES`; `NotForTheLane`
        for a head whose blank line is not CRLF CRLF (bare LF: tornado ends a head at the
        first `\\r?\\n\\r?\\n` and answers it, so the lane never waits for a CRLF CRLF)."""
        end = _HEAD_END.search(buffer, 0, MAX_HEAD_BYTES + 4)
        if end is not None:
            if end.end() - end.start() != 4:
                raise NotForTheLane("a head ending in a bare line feed")
            return end.end()
        if len(buffer) > MAX_HEAD_BYTES:
            raise HeadTooLarge("head too large")
        return None

    def read_head(self, head: bytes) -> LaneRequest:
        """The request of this head (up to and with its blank line), or `NotForTheLane`."""
        self._reset()
        self._feed(head)
        if not self.head_done or self.begun != 1 or self.body_seen:
            raise NotForTheLane("llhttp read another extent of the head")
        if self.parser.get_http_version() != "1.1":
            raise NotForTheLane("not HTTP/1.1")
        request = self._request()
        if self.complete != (request.content_length == 0):
            raise NotForTheLane("llhttp read another extent of the body")
        return request

    def read_body(self, body: memoryview) -> None:
        """Feed the body of the request `read_head` returned (exactly its length)."""
        self._feed(body)
        if not self.complete or self.body_seen != len(body):
            raise NotForTheLane("llhttp read another extent of the body")

    def _feed(self, data: bytes | memoryview) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            raise NotForTheLane("upgrade") from None
        except httptools.HttpParserError as error:
            raise NotForTheLane(f"llhttp: {error}") from None

    def _request(self) -> LaneRequest:
        try:
            items = [(header_case(n.decode("ascii")), v.decode("latin-1").strip(" \t"))
                     for n, v in self.items]  # fmt: skip
            uri = self.url.decode("ascii")
        except UnicodeDecodeError:
            raise NotForTheLane("non-ASCII name or target") from None
        headers = LaneHeaders(items)
        if any(name in _REFUSED for name, _ in items):
            raise NotForTheLane("transfer coding, expectation or upgrade")
        if "Host" not in headers:
            raise NotForTheLane("no Host: tornado refuses an HTTP/1.1 request without one")
        connection = headers.get("Connection", "").lower()
        if connection not in ("", "keep-alive", "close") or not uri.startswith("/"):
            raise NotForTheLane("connection options or target form")
        return LaneRequest(
            method=self.parser.get_method().decode("ascii"),
            uri=uri,
            headers=headers,
            content_length=_content_length(headers),
            close_after=connection == "close",
        )


def _content_length(headers: LaneHeaders) -> int:
    """The body's length (llhttp has checked the header's syntax and uniqueness)."""
    announced = headers.get("Content-Length")
    if announced is None:
        return 0
    if not announced.isdigit() or not announced.isascii() or len(announced) > 18:
        raise NotForTheLane("content length")
    return int(announced)
