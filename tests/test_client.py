"""Kernel-side discovery of the Jupyter server, and the HTTP client against a real server."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jupyter_serve.client import (
    ServeClient,
    ServeClientError,
    ServerInfo,
    ServerNotFound,
    discover,
)


def write_runtime(folder: Path, pid: int, url: str, token: str) -> None:
    (folder / f"jpserver-{pid}.json").write_text(json.dumps({"url": url, "token": token}))


def test_explicit_beats_environment_beats_runtime_files(tmp_path: Path) -> None:
    write_runtime(tmp_path, 42, "http://127.0.0.1:9/", "file-token")
    env = {"JUPYTER_SERVE_URL": "http://env:1/", "JUPYTER_SERVE_TOKEN": "env-token",
           "JPY_PARENT_PID": "42"}  # fmt: skip
    assert discover("http://arg:2/", "arg", env=env, runtime=tmp_path) == ServerInfo(
        "http://arg:2/", "arg", "explicit"
    )
    assert discover(env=env, runtime=tmp_path) == ServerInfo(
        "http://env:1/", "env-token", "environment"
    )
    del env["JUPYTER_SERVE_URL"]
    found = discover(env=env, runtime=tmp_path)
    assert (found.url, found.token) == ("http://127.0.0.1:9/", "file-token")
    assert found.source == "runtime file jpserver-42.json"


def test_without_anything_it_says_how_to_connect(tmp_path: Path) -> None:
    with pytest.raises(ServerNotFound, match="JUPYTER_SERVE_URL"):
        discover(env={}, runtime=tmp_path)


@pytest.fixture
def kernels_server() -> Iterator[str]:
    """A loopback HTTP server whose /api/kernels lists one kernel (and checks the token)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path.endswith("/api/kernels") and self.headers["Authorization"] == "token t2"
            body = json.dumps([{"id": "kernel-abc"}] if ok else {"message": "no"}).encode()
            self.send_response(200 if ok else 403)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/base/"
    server.shutdown()
    server.server_close()
    thread.join()


def test_scan_matches_the_server_running_this_kernel(tmp_path: Path, kernels_server: str) -> None:
    write_runtime(tmp_path, 1, "http://127.0.0.1:9/", "t1")  # nobody listens there
    write_runtime(tmp_path, 2, kernels_server, "t2")
    found = discover(env={}, runtime=tmp_path, kernel_id="kernel-abc")
    assert (found.url, found.token) == (kernels_server, "t2")
    with pytest.raises(ServerNotFound):
        discover(env={}, runtime=tmp_path, kernel_id="another-kernel")


@pytest.fixture
def server_info(
    jp_serverapp: Any, http_server_client: Any, jp_http_port: int, jp_base_url: str
) -> ServerInfo:
    token = jp_serverapp.identity_provider.token
    return ServerInfo(f"http://localhost:{jp_http_port}{jp_base_url}", token)


async def test_client_pings_and_lists_against_a_real_server(server_info: ServerInfo) -> None:
    client = ServeClient(server_info, timeout=10)
    assert await asyncio.to_thread(client.ping) == {"status": "Healthy"}


async def test_client_turns_error_json_into_serve_client_error(server_info: ServerInfo) -> None:
    client = ServeClient(server_info, timeout=10)
    with pytest.raises(ServeClientError) as caught:
        await asyncio.to_thread(client.request, "GET", "no/such/route")
    assert caught.value.status == 404
    assert caught.value.error_type == "ResourceNotFoundException"


async def test_client_without_the_token_is_refused(server_info: ServerInfo) -> None:
    client = ServeClient(ServerInfo(server_info.url, ""), timeout=10)
    with pytest.raises(ServeClientError) as caught:
        await asyncio.to_thread(client.ping)
    assert caught.value.status == 403
