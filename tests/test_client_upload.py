"""`ServeClient.register` of this machine's paths, and `upload`, against a real server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from route_models import PROBE, serve_state, server_config

from jupyter_serve.archive import ArchiveSpec, build_mar
from jupyter_serve.kernel.client import (
    NotAnArchive,
    ServeClient,
    ServeClientError,
    UploadError,
    local_archive,
)


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


def probe_mar(folder: Path, comment: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probe.py").write_text(PROBE + comment)
    spec = ArchiveSpec(model_name="probe", handler=str(folder / "probe.py"), version="1.0",
                       export_path=str(folder), force=True)  # fmt: skip
    return build_mar(spec)


def test_local_archive_is_an_existing_file_of_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("x.mar").write_bytes(b"zip")
    Path("folder").mkdir()
    assert local_archive("x.mar") == tmp_path / "x.mar"
    assert local_archive(str(tmp_path / "x.mar")) == tmp_path / "x.mar"
    for unchanged in ("store-only.mar", "https://example.org/x.mar", "file:///x.mar"):
        assert local_archive(unchanged) is None
    with pytest.raises(NotAnArchive, match="folder is a folder: build an archive"):
        local_archive("folder")


async def test_register_uploads_what_the_server_cannot_read(
    client: ServeClient, jp_serverapp: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    probe_mar(tmp_path / "ms")
    answer = await asyncio.to_thread(client.register, "ms/probe.mar", initial_workers=0)
    assert answer["uploaded"] == "probe.mar"
    assert "registered" in answer["status"]
    registry, store = serve_state(jp_serverapp)
    assert registry.get("probe").spec.model_url == "probe.mar"
    assert (store / "probe.mar").read_bytes() == (tmp_path / "ms" / "probe.mar").read_bytes()


async def test_upload_conflicts_and_overwrite(
    client: ServeClient, jp_serverapp: Any, tmp_path: Path
) -> None:
    first = probe_mar(tmp_path / "a")
    assert (await asyncio.to_thread(client.upload, first, "p.mar"))["url"] == "p.mar"
    other = probe_mar(tmp_path / "b", "# other\n")
    with pytest.raises(UploadError) as caught:
        await asyncio.to_thread(client.upload, other, "p.mar")
    assert caught.value.status == 409
    assert caught.value.message.startswith("uploading probe.mar: Archive p.mar already exists")
    await asyncio.to_thread(client.upload, other, "p.mar", overwrite=True)
    _, store = serve_state(jp_serverapp)
    assert (store / "p.mar").read_bytes() == other.read_bytes()


async def test_a_store_name_goes_to_the_server_unchanged(
    client: ServeClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no such file here: the server looks in its model store
    with pytest.raises(ServeClientError) as caught:
        await asyncio.to_thread(client.register, "nope.mar")
    assert not isinstance(caught.value, UploadError)
    assert (caught.value.status, caught.value.message) == (
        404, "Model not found at: nope.mar",
    )  # fmt: skip
