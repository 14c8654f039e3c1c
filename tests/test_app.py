"""The server extension: enabled by default, routes under {base_url}serve/, auth everywhere.

This module's server forks its workers from the worker factory (`fork_workers`,
the default) to show that a server serving no model starts no factory, and that
`stop_extension` stops the factory with the workers.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from route_models import register, serve_state, server_config
from tornado.httpclient import HTTPClientError
from tornado.httpserver import HTTPServer

from jupyter_serve.server.app import WORKER_LOGGER, ServeApp, hide_worker_output, show_worker_output
from jupyter_serve.server.pool.factory import FactoryState

Fetch = Callable[..., Awaitable[Any]]


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path, fork_workers=True)


def serve_app(serverapp: Any) -> ServeApp:
    app: ServeApp = serverapp.web_app.settings["serve_app"]
    return app


def worker_children() -> list[int]:
    """This process's worker processes: the factory, the workers it forked, fresh ones."""
    children = psutil.Process().children(recursive=True)
    return [child.pid for child in children if "jupyter_serve.worker" in " ".join(child.cmdline())]


async def test_ping_answers_healthy_with_the_token(jp_fetch: Fetch) -> None:
    response = await jp_fetch("serve", "ping")
    assert response.code == 200
    assert json.loads(response.body) == {"status": "Healthy"}


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
async def test_ping_answers_whatever_the_verb_as_torchserve_does(
    jp_fetch: Fetch, method: str
) -> None:
    body = b"" if method in ("POST", "PUT", "PATCH") else None
    response = await jp_fetch("serve", "ping", method=method, body=body)
    assert response.code == 200
    assert json.loads(response.body) == {"status": "Healthy"}


async def test_ping_answers_head_with_no_body(jp_fetch: Fetch) -> None:
    response = await jp_fetch("serve", "ping", method="HEAD")
    assert response.code == 200
    assert response.body == b""


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE"])
async def test_routes_refuse_requests_without_credentials(jp_fetch: Fetch, method: str) -> None:
    body = b"" if method in ("POST", "PUT") else None
    for path in (("serve", "ping"), ("serve", "no-such-route")):
        with pytest.raises(HTTPClientError) as caught:
            await jp_fetch(*path, method=method, body=body, headers={"Authorization": ""})
        assert caught.value.code == 403


async def test_unknown_route_gets_torchserve_error_json(jp_fetch: Fetch) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("serve", "nothing", "here")
    assert caught.value.code == 404
    assert caught.value.response is not None
    assert json.loads(caught.value.response.body) == {
        "code": 404,
        "type": "ResourceNotFoundException",
        "message": "Requested resource is not found, please refer to API document.",
    }


async def test_wrong_verb_gets_method_not_allowed_json(jp_fetch: Fetch) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("serve", "models", method="PATCH", body=b"")
    assert caught.value.code == 405
    assert caught.value.response is not None
    assert json.loads(caught.value.response.body)["type"] == "MethodNotAllowedException"


def test_extension_is_enabled_by_the_installed_config() -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "jupyter", "server", "extension", "list"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    output = listing.stdout + listing.stderr
    assert "jupyter_serve" in output
    assert "jupyter_serve 0.1.0" in output


async def test_a_server_serving_no_model_starts_no_factory(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    assert (await jp_fetch("serve", "models")).code == 200
    factory = serve_app(jp_serverapp).factory
    assert (factory.state, factory.starts, worker_children()) == (FactoryState.IDLE, 0, [])


async def test_workers_are_forked_and_stop_extension_stops_them_and_the_factory(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    app, (registry, _) = serve_app(jp_serverapp), serve_state(jp_serverapp)
    await register(jp_serverapp, "first")
    await register(jp_serverapp, "second", workers=2)
    workers = [
        w["pid"] for name in ("first", "second") for w in registry.describe(name)[0]["workers"]
    ]
    assert {psutil.Process(pid).ppid() for pid in workers} == {app.factory.pid}
    raw = {"Content-Type": "application/octet-stream"}
    answer = await jp_fetch(
        "serve", "predictions", "second", method="POST", body=b"hi", headers=raw
    )
    assert (answer.code, answer.body) == (200, b"hi")
    running = [*workers, app.factory.pid]
    assert sorted(worker_children()) == sorted(running)
    await app.stop_extension()
    assert not [pid for pid in running if psutil.pid_exists(pid)]  # all reaped, none left
    assert app.factory.state is FactoryState.STOPPED


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_worker_output_is_shown_where_the_server_logs_until_it_stops() -> None:
    server_log = logging.getLogger("test-serverapp-log")
    collect = _Collect()
    server_log.addHandler(collect)
    attached = show_worker_output(server_log)
    try:
        WORKER_LOGGER.info("[m/9000] hello from the handler")
        assert collect.lines == ["[m/9000] hello from the handler"]
        assert show_worker_output(server_log) == []  # configured already: left alone
    finally:
        hide_worker_output(attached)
    WORKER_LOGGER.info("[m/9000] after the stop")
    assert collect.lines == ["[m/9000] hello from the handler"]
    assert (WORKER_LOGGER.handlers, WORKER_LOGGER.propagate) == ([], True)


async def test_starting_the_extension_puts_the_lane_in_front_of_the_servers_http_server(
    jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = HTTPServer(jp_serverapp.web_app)  # what `jupyter serve` / `jupyter lab` create
    tornados = server.handle_stream
    monkeypatch.setattr(jp_serverapp, "_http_server", server, raising=False)
    app = jp_serverapp.web_app.settings["serve_app"]
    await app._start_jupyter_server_extension(jp_serverapp)
    assert server.handle_stream == app.lane.handle_stream
    assert app.lane.tornado_handle_stream == tornados
    await app.startup_task
    await app.stop_extension()
    assert server.handle_stream == tornados  # stopping gives tornado its connections back
