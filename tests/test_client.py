"""The kernel side's HTTP client against a real server (finding it: test_discovery.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jupyter_serve.kernel.client import ServeClient, ServeClientError, ServerInfo


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
