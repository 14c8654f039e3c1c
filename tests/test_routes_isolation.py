"""Through jp_fetch, with real workers: `GET serve/logs` answers stay bounded, and the
server's credentials and `ServeApp.worker_env_withheld` stay out of every handler.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPResponse

from jupyter_serve.archive import ArchiveSpec, build_mar
from jupyter_serve.server.pool.logs import CUT_MARK, MAX_ANSWER_BYTES, MAX_LINE_CHARS

Fetch = Callable[..., Awaitable[HTTPResponse]]
HANG_GUARD = 120.0  # seconds; only stops a broken worker from hanging the suite

# Each request prints 150 lines of 100 KB of control characters (6 JSON bytes each).
LOUD = """
def handle(data, context):
    if not data:
        return None
    for i in range(150):
        print(f"{i:03d} " + "\\x01" * 100_000)
    print("done", flush=True)
    return ["ok" for _ in data]
"""

ENVIRON = """
import json
import os


def handle(data, context):
    if not data:
        return None
    return [json.dumps(dict(os.environ)) for _ in data]
"""


@pytest.fixture(params=[False, True], ids=["fresh", "forked"])
def fork_workers(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def jp_server_config(
    jp_server_config: dict[str, Any], tmp_path: Path, fork_workers: bool
) -> dict[str, Any]:
    serve = {
        "workdir": str(tmp_path / "work"), "model_store": str(tmp_path / "store"),
        "worker_env_withheld": ["MY_PRIVATE_*"], "fork_workers": fork_workers,
    }  # fmt: skip
    return {**jp_server_config, "ServeApp": {**jp_server_config["ServeApp"], **serve}}


@pytest.fixture
def serve_app(jp_serverapp: Any) -> Any:
    return jp_serverapp.web_app.settings["serve_app"]


def build(serve_app: Any, tmp_path: Path, name: str, source: str) -> str:
    src = tmp_path / f"src-{name}"
    src.mkdir()
    (src / "handler.py").write_text(source)
    handler = str(src / "handler.py")
    spec = ArchiveSpec(model_name=name, handler=handler, version="1.0", export_path=str(src))
    built = build_mar(spec)
    return built.rename(Path(serve_app.model_store) / f"{name}.mar").name


async def register(jp_fetch: Fetch, url: str) -> None:
    params = {"url": url, "initial_workers": "1", "synchronous": "true"}
    answer = await jp_fetch("serve", "models", method="POST", body=b"", params=params)
    assert answer.code == 200


async def predict(jp_fetch: Fetch, name: str, body: bytes = b"go") -> bytes:
    answer = await jp_fetch("serve", "predictions", name, method="POST", body=body)
    return bytes(answer.body)


@pytest.mark.parametrize("fork_workers", [False], indirect=True, ids=["fresh"])
async def test_the_logs_answer_is_bounded_however_much_a_handler_prints(
    jp_fetch: Fetch, serve_app: Any, tmp_path: Path
) -> None:
    await register(jp_fetch, build(serve_app, tmp_path, "loud", LOUD))
    log = serve_app.registry.get("loud").pool.log
    done = asyncio.Event()
    unsubscribe = log.subscribe(lambda line: done.set() if line.endswith("] done") else None)
    try:
        assert await predict(jp_fetch, "loud") == b"ok"
        await asyncio.wait_for(done.wait(), HANG_GUARD)
    finally:
        unsubscribe()
    answer = await jp_fetch("serve", "logs", "loud", params={"lines": "500"})
    assert len(answer.body) <= MAX_ANSWER_BYTES + 1024
    lines = json.loads(answer.body)["lines"]
    assert lines[-1].endswith("] done")
    assert [line.endswith(CUT_MARK) for line in lines[-3:-1]] == [True, True]
    assert max(map(len, lines)) < MAX_LINE_CHARS + len(CUT_MARK) + 60


async def test_handlers_get_neither_the_servers_token_nor_the_listed_variables(
    jp_fetch: Fetch,
    jp_serverapp: Any,
    serve_app: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fork_workers: bool,
) -> None:
    if fork_workers:
        pytest.importorskip("torch")
    token = jp_serverapp.identity_provider.token
    hub = {"JUPYTERHUB_API_TOKEN": "hub-secret", "JPY_API_TOKEN": "hub-secret"}
    for name, value in {"JUPYTER_TOKEN": token, **hub, "MY_PRIVATE_X": "mine"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    await register(jp_fetch, build(serve_app, tmp_path, "environ", ENVIRON))
    [worker] = serve_app.registry.get("environ").pool.processes
    env = json.loads(await predict(jp_fetch, "environ"))
    assert worker.forked is fork_workers
    assert not {"JUPYTER_TOKEN", *hub, "MY_PRIVATE_X"} & set(env)
    assert not [name for name, value in env.items() if token in value or "secret" in value]
    assert env["JUPYTERHUB_USER"] == "ada"
