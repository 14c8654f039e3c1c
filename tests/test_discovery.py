"""Kernel-side discovery of the Jupyter server: arguments, environment, runtime files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jupyter_serve.kernel.client import discover
from jupyter_serve.kernel.discovery import ServerInfo, ServerNotFound


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


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def test_outside_a_kernel_the_one_running_server_is_found(tmp_path: Path) -> None:
    with pytest.raises(ServerNotFound, match="No running Jupyter server"):
        discover(env={}, runtime=tmp_path, any_server=True)
    write_runtime(tmp_path, dead_pid(), "http://127.0.0.1:1/", "t1")  # a server that crashed
    write_runtime(tmp_path, os.getpid(), "http://127.0.0.1:2/", "t2")
    found = discover(env={}, runtime=tmp_path, any_server=True)
    assert (found.url, found.token) == ("http://127.0.0.1:2/", "t2")
    with pytest.raises(ServerNotFound, match="%serve connect"):
        discover(env={}, runtime=tmp_path)  # kernels keep their own rules
    write_runtime(tmp_path, os.getppid(), "http://127.0.0.1:3/", "t3")
    with pytest.raises(ServerNotFound, match=r"Several Jupyter servers.*--url"):
        discover(env={}, runtime=tmp_path, any_server=True)
    env = {"JUPYTER_SERVE_URL": "http://env:1/", "JUPYTER_SERVE_TOKEN": "e"}
    assert discover(env=env, runtime=tmp_path, any_server=True).url == "http://env:1/"


def test_a_url_alone_takes_the_token_of_the_running_server_at_that_address(
    tmp_path: Path,
) -> None:
    write_runtime(tmp_path, os.getpid(), "http://127.0.0.1:8801/", "plain")
    write_runtime(tmp_path, os.getppid(), "http://localhost:8802/jupyter/", "based")
    write_runtime(tmp_path, dead_pid(), "http://127.0.0.1:8803/", "crashed")
    env = {"JUPYTER_SERVE_TOKEN": "from-env"}
    for url in ("http://localhost:8801", "http://127.0.0.1:8801/", "localhost:8801/lab",
                "http://[::1]:8801/tree?x=1"):  # fmt: skip
        assert discover(url, env=env, runtime=tmp_path).token == "plain", url
    based = discover("http://127.0.0.1:8802/jupyter/lab/tree", env=env, runtime=tmp_path)
    assert based == ServerInfo("http://localhost:8802/jupyter/", "based", "explicit")
    assert discover("http://localhost:8801/", "given", env=env, runtime=tmp_path).token == "given"
    pasted = discover("http://localhost:8801/lab?token=pasted", env=env, runtime=tmp_path)
    assert pasted.token == "pasted"
    for elsewhere in ("http://localhost:8803/", "http://localhost:8802/", "https://localhost:8801/",
                      "http://example.org:8801/"):  # fmt: skip
        found = discover(elsewhere, env=env, runtime=tmp_path)
        assert (found.url, found.token) == (elsewhere, "from-env"), elsewhere
