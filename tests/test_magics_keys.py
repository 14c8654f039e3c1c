"""`%serve keys list|create|revoke` through IPython's shell, against a real server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from magic_shell import magic_shell
from route_models import server_config

from jupyter_serve.kernel.client import ServerInfo


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


@pytest.fixture
def shell(live_server: ServerInfo) -> Iterator[InteractiveShell]:
    """A shell with the magics, pointed at the in-process server (as `%serve connect`)."""
    with magic_shell(live_server) as ip:
        yield ip


def magic(shell: InteractiveShell, line: str) -> Any:
    return asyncio.to_thread(shell.run_line_magic, "serve", line)


async def test_create_list_and_revoke(
    shell: InteractiveShell, jp_serverapp: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    minted = await magic(shell, "keys create --name notebook --models probe")
    assert f"Key {minted['id']} created: its key is shown only now" in capsys.readouterr().out
    store = jp_serverapp.web_app.settings["serve_keys"]
    assert store.allows(minted["key"], "probe")
    assert not store.allows(minted["key"], "other")

    listed = await magic(shell, "keys list")
    assert listed == [{"id": minted["id"], "name": "notebook", "models": ["probe"],
                       "created": minted["created"]}]  # fmt: skip

    await magic(shell, f"keys revoke {minted['id']}")
    assert capsys.readouterr().out == f"Key {minted['id']} revoked.\n"
    assert await magic(shell, "keys list") == []


def test_keys_usage_errors(shell: InteractiveShell) -> None:
    for line in ("keys", "keys frobnicate", "keys revoke", "keys create --scope a"):
        with pytest.raises(UsageError):
            shell.run_line_magic("serve", line)
