"""`jupyter serve keys list|create|revoke` against a real server; `jupyter serve` unchanged."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest
from route_models import server_config
from serve_process import jupyter_command

from jupyter_serve.cli import keys_main, main


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


@pytest.fixture
def server(live_server: Any) -> list[str]:
    """`--url U --token T` of the in-process server."""
    return ["--url", live_server.url, "--token", live_server.token]


async def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`jupyter serve ...` in a thread (the server answers on this loop meanwhile)."""
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_create_list_and_revoke(
    server: list[str], jp_serverapp: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = await run(capsys, "keys", "create", "--name", "ci", "--models", "a,b",
                               *server)  # fmt: skip
    assert code == 0
    key = out.strip()  # the key alone on stdout: KEY=$(jupyter serve keys create ...)
    store = jp_serverapp.web_app.settings["serve_keys"]
    (info,) = store.list_keys()
    assert store.allows(key, "a")
    assert not store.allows(key, "c")
    assert f"Key {info.key_id} may run: a, b. It is shown only now" in err

    code, out, _ = await run(capsys, "keys", "list", *server)
    assert code == 0
    assert out.splitlines()[1].split()[:3] == [info.key_id, "ci", "a,b"]
    assert key not in out

    code, out, _ = await run(capsys, "keys", "revoke", info.key_id, *server)
    assert (code, out) == (0, f"Key {info.key_id} revoked.\n")
    assert not store.allows(key, "a")
    code, out, _ = await run(capsys, "keys", "list", *server)
    assert out == "(no inference keys)\n"

    code, _, err = await run(capsys, "keys", "revoke", info.key_id, *server)
    assert code == 1
    assert err.startswith("jupyter serve keys: HTTP 404 Key not found")


async def test_the_server_is_found_from_the_environment(
    server: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JUPYTER_SERVE_URL", server[1])
    monkeypatch.setenv("JUPYTER_SERVE_TOKEN", server[3])
    code, out, _ = await run(capsys, "keys", "create")
    assert code == 0
    assert out.startswith("jsk_")
    monkeypatch.setenv("JUPYTER_SERVE_TOKEN", "wrong")
    code, _, err = await run(capsys, "keys", "list")
    assert code == 1
    assert "403" in err


def test_no_server_is_an_error_saying_how_to_connect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("JUPYTER_SERVE_URL", raising=False)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    assert keys_main(["list"]) == 1
    assert "pass --url and --token" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["keys"], ["keys", "frobnicate"], ["keys", "revoke"]):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == 2
    assert "jupyter serve keys" in capsys.readouterr().err


def test_help_of_keys_and_of_jupyter_serve() -> None:
    command = [*jupyter_command(), "serve"]
    keys = subprocess.run([*command, "keys", "--help"], capture_output=True, text=True,
                          check=True)  # fmt: skip
    assert "{list,create,revoke}" in keys.stdout
    assert "Inference keys: they may run models" in keys.stdout
    serve = subprocess.run([*command, "--help"], capture_output=True, text=True, check=True)
    assert "--model-store" in serve.stdout  # `jupyter serve` itself is unchanged
    assert "jupyter serve keys --help" in serve.stdout
