"""`GET serve/models/{m}/{v}/archive`: the .mar a version serves from, copied or packed."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from route_models import PROBE, register, serve_state, server_config
from tornado.httpclient import HTTPResponse

from jupyter_serve.archive import ArchiveSpec, build_mar
from jupyter_serve.server.models import RegisterParams

Fetch = Callable[..., Awaitable[HTTPResponse]]


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


async def download(jp_fetch: Fetch, name: str, version: str) -> HTTPResponse:
    return await jp_fetch("serve", "models", name, version, "archive", raise_error=False)


def members(body: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


async def test_an_archive_from_the_model_store_comes_back_byte_for_byte(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp, version="2.0", workers=0)
    _, store = serve_state(jp_serverapp)
    answer = await download(jp_fetch, "probe", "2.0")
    assert answer.code == 200
    assert answer.body == (store / "probe-2.0.mar").read_bytes()
    assert answer.headers["Content-Type"] == "application/octet-stream"
    assert answer.headers["Content-Disposition"] == 'attachment; filename="probe.mar"'


async def test_a_handler_given_at_register_is_written_into_a_packed_manifest(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp, workers=0, handler="probe:handle")
    answer = await download(jp_fetch, "probe", "1.0")
    files = members(answer.body)
    assert json.loads(files["MAR-INF/MANIFEST.json"])["model"]["handler"] == "probe:handle"
    assert files["probe.py"] == PROBE.encode()
    assert not list((Path(serve_state(jp_serverapp)[0].config.workdir) / ".export").iterdir())


async def test_a_folder_model_is_packed_and_one_whose_files_are_gone_is_a_404(
    jp_fetch: Fetch, jp_serverapp: Any, tmp_path: Path
) -> None:
    registry, store = serve_state(jp_serverapp)
    (tmp_path / "probe.py").write_text(PROBE)
    spec = ArchiveSpec(model_name="folder", version="3.0", handler=str(tmp_path / "probe.py"),
                       export_path=str(store), archive_format="no-archive")  # fmt: skip
    build_mar(spec)
    await registry.register("folder", RegisterParams(initial_workers=0))
    files = members((await download(jp_fetch, "folder", "3.0")).body)
    assert set(files) == {"probe.py", "MAR-INF/MANIFEST.json"}
    assert json.loads(files["MAR-INF/MANIFEST.json"])["model"]["modelVersion"] == "3.0"

    shutil.rmtree(store / "folder")
    gone = await download(jp_fetch, "folder", "3.0")
    assert gone.code == 404
    assert json.loads(gone.body)["message"] == (
        "The files of model folder version 3.0 are gone: folder "
        "(neither the archive nor its extracted folder is left)"
    )


async def test_an_archive_removed_from_the_store_is_packed_from_what_is_served(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp, workers=0)
    _, store = serve_state(jp_serverapp)
    original = members((store / "probe-1.0.mar").read_bytes())
    (store / "probe-1.0.mar").unlink()
    answer = await download(jp_fetch, "probe", "1.0")
    assert answer.code == 200
    assert members(answer.body) == original


async def test_unknown_models_and_versions_are_404(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp, workers=0)
    assert (await download(jp_fetch, "nobody", "1.0")).code == 404
    missing = await download(jp_fetch, "probe", "9.9")
    assert json.loads(missing.body)["message"] == (
        "Model version: 9.9 does not exist for model: probe"
    )
