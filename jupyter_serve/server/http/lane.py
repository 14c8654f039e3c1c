"""The serve lane: token-authenticated predictions answered at the connection.

Profiling showed most of the Jupyter server's CPU per token prediction, once
jupyter_server's handler is skipped, in tornado's HTTP/1.1 layer itself (its coroutines,
header parsing, `HTTPServerRequest`, the router's delegates). So `Lane` takes over the Jupyter
server's `HTTPServer.handle_stream` (tornado's documented hook for a new
connection): each new plain-TCP connection is read first by a `LaneProtocol`, an
asyncio protocol on the accepted socket, whose requests are parsed by llhttp
(`lane_http.RequestReader`). A request whose path is `{base_url}serve/predictions/...`
or `explanations/...` and which `admission.admits` (the server's token, an inference
key for that model or a hub token the hub admitted, a local `Host`, no `Origin`, no
`token` argument) is answered by the fast path's exchange (`fastpath.py`), with the same bytes as
through tornado. Keep-alive connections go on in the lane. A hub token the server has
no fresh verdict on yet holds the connection (reading nothing) until the hub has
answered (`hub_verdicts.py`), then the request is taken or handed over.

The first request that is anything else (another route, a cookie, `?token=`, a
wrong token, a chunked body, a head llhttp rejects or reads differently...) hands
the connection to tornado for good, once every answer already written has left:
the socket is duplicated into a `PrefixedIOStream` that yields the bytes the lane
read and did not use before reading the socket again (through `read_from_fd`,
tornado's documented override point), and tornado's own `handle_stream` serves it
from there, as if the lane had never been. Requests pipelined behind it are
answered by tornado in order; nothing is lost and nothing is logged.

Flow control, both ways: requests are taken one at a time (pipelined ones wait in
the buffer, and reading pauses once more than `READ_SIZE` bytes wait); while the
transport's write buffer is above its high-water mark (asyncio's `pause_writing`)
the lane reads nothing and starts no request, so a client that sends and never
reads costs at most a buffer of each, as tornado's TCP back-pressure does. TLS
connections and servers with no `admission.fast_path_token` stay tornado's.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
from collections.abc import Callable
from typing import Any

from tornado import iostream
from tornado.escape import url_unescape

from jupyter_serve.server.http.admission import (
    HUB_VERDICTS,
    VERBS,
    Verdict,
    admits,
    header_token,
)
from jupyter_serve.server.http.exchange import MODEL_PATH
from jupyter_serve.server.http.lane_connection import LaneProtocol, Target
from jupyter_serve.server.http.lane_http import AskHub, LaneRequest, NotForTheLane


class PrefixedIOStream(iostream.IOStream):
    """An `IOStream` that reads `prefix` before its socket (the lane's unread bytes)."""

    def __init__(self, sock: socket.socket, prefix: bytes, **kwargs: Any) -> None:
        super().__init__(sock, **kwargs)
        self.prefix = memoryview(prefix)

    def read_from_fd(self, buf: bytearray | memoryview) -> int | None:
        if not self.prefix:
            return super().read_from_fd(buf)
        size = min(len(buf), len(self.prefix))
        buf[:size] = self.prefix[:size]
        self.prefix = self.prefix[size:]
        return size


class Lane:
    """Reads each new connection of one `HTTPServer` first (see the module docstring).

    `targets` maps `predictions` and `explanations` to the fast path's callables
    (called with the request and the unescaped path arguments); `token` gives the
    server's current token; `max_body` is the largest body the lane reads itself;
    `settings` are the web app's (for the host check).
    """

    def __init__(self, http_server: Any, path_prefix: str, targets: dict[str, Target],
                 token: Callable[[], str], max_body: Callable[[], int],
                 settings: dict[str, Any]) -> None:  # fmt: skip
        self.http_server = http_server
        self.tornado_handle_stream = http_server.handle_stream
        kinds = "|".join(re.escape(kind) for kind in targets)
        self.path = re.compile(re.escape(path_prefix) + f"({kinds})" + MODEL_PATH)
        self.targets = targets
        self.token = token
        self.max_body = max_body
        self.settings = settings
        self.connections: set[LaneProtocol] = set()
        self.setting_up: set[asyncio.Task[Any]] = set()
        params = getattr(http_server, "conn_params", None)
        # tornado closes a connection that sends no complete head for this long
        self.header_timeout = float(getattr(params, "header_timeout", None) or 3600)

    def attach(self) -> None:
        """Read the server's new connections first (tornado keeps what the lane leaves)."""
        self.http_server.handle_stream = self.handle_stream

    def detach(self) -> None:
        self.http_server.handle_stream = self.tornado_handle_stream
        for connection in list(self.connections):
            connection.abort()

    def handle_stream(self, stream: iostream.IOStream, address: Any) -> None:
        """A new connection: the lane's, unless it is TLS."""
        if isinstance(stream, iostream.SSLIOStream):
            self.tornado_handle_stream(stream, address)
            return
        loop = asyncio.get_running_loop()
        sock = stream.socket
        made = loop.connect_accepted_socket(lambda: LaneProtocol(self, sock, address), sock)
        task = loop.create_task(made)
        self.setting_up.add(task)  # a reference until the transport exists
        task.add_done_callback(self.setting_up.discard)

    def hand_over(self, sock: socket.socket, address: Any, unread_bytes: bytes) -> None:
        """Serve the rest of this connection with tornado, starting with `unread_bytes`."""
        server = self.http_server
        stream = PrefixedIOStream(socket.socket(fileno=os.dup(sock.fileno())), unread_bytes,
                                  max_buffer_size=server.max_buffer_size,
                                  read_chunk_size=server.read_chunk_size)  # fmt: skip
        self.tornado_handle_stream(stream, address)

    def route(self, request: LaneRequest, may_ask: bool = True) -> tuple[Target, list[str | None]]:
        """The fast path's target and path arguments for `request`; `NotForTheLane`, or `AskHub`
        when a hub token's verdict must be learnt first (only if `may_ask`)."""
        if request.method not in VERBS or request.content_length > self.max_body():
            raise NotForTheLane("verb or size")
        found = self.path.fullmatch(request.path)
        if found is None:
            raise NotForTheLane("path")
        kind, *args = found.groups()
        path_args = [_unescape(arg) for arg in args]
        verdict = admits(request.headers.get, self.token(), self.settings, path_args[0],
                         request.query)  # fmt: skip
        if verdict is Verdict.ASK_HUB and may_ask:
            token = header_token(request.headers.get("Authorization") or "")
            raise AskHub(self.settings[HUB_VERDICTS].learn(token))
        if not verdict:
            raise NotForTheLane("not surely admitted (credentials, Host, Origin, ?token=)")
        return self.targets[kind], path_args


def _unescape(arg: str | None) -> str | None:
    """A path argument percent-decoded and UTF-8-decoded, as `RequestHandler` gives it;
    `NotForTheLane` when it is not UTF-8, which tornado's route answers with a 400."""
    if arg is None:
        return None
    try:
        return url_unescape(arg, encoding=None, plus=False).decode("utf-8")
    except UnicodeDecodeError:
        raise NotForTheLane("a path argument that is not UTF-8") from None
