"""The client's inference-key calls against a real server, and the key table."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from route_models import server_config

from jupyter_serve.kernel.client import ServeClient, ServeClientError, ServerInfo
from jupyter_serve.server.keys import key_table


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


async def test_create_list_and_revoke_keys(client: ServeClient) -> None:
    minted = await asyncio.to_thread(client.create_key, "nb", ["a", "b"])
    assert (minted["name"], minted["models"]) == ("nb", ["a", "b"])
    assert minted["key"].startswith("jsk_")
    unscoped = await asyncio.to_thread(client.create_key)
    assert unscoped["models"] is None
    listed = await asyncio.to_thread(client.list_keys)
    assert [key["id"] for key in listed] == [minted["id"], unscoped["id"]]
    assert "key" not in listed[0]
    revoked = await asyncio.to_thread(client.revoke_key, minted["id"])
    assert revoked == {"status": f"Key {minted['id']} revoked."}
    with pytest.raises(ServeClientError) as missing:
        await asyncio.to_thread(client.revoke_key, minted["id"])
    assert missing.value.status == 404


async def test_a_key_cannot_manage_keys(client: ServeClient) -> None:
    minted = await asyncio.to_thread(client.create_key)
    as_key = ServeClient(ServerInfo(client.server.url, minted["key"]))
    for call in (as_key.list_keys, as_key.create_key):
        with pytest.raises(ServeClientError) as refused:
            await asyncio.to_thread(call)
        assert refused.value.status == 403


def test_key_table() -> None:
    assert key_table([]) == "(no inference keys)"
    table = key_table(
        [
            {"id": "0123456789ab", "name": "ci", "models": ["a", "b"], "created": "T1"},
            {"id": "ba9876543210", "name": "", "models": None, "created": "T2"},
        ]
    )
    assert table.splitlines() == [
        "ID            NAME  MODELS  CREATED",
        "0123456789ab  ci    a,b     T1",
        "ba9876543210  -     (all)   T2",
    ]
