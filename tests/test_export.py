"""`jupyter serve export` and `%serve export` against a real server, and the trip back:
`jupyter serve --ts-config` on the export serves the same models, versions and settings."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from IPython.core.interactiveshell import InteractiveShell
from kserve_schema import validate_inference_service
from magic_shell import magic_shell
from route_models import PROBE, register, serve_state, server_config
from serve_process import ServeProcess

from jupyter_serve.archive import ArchiveSpec, build_mar, inspect_archive
from jupyter_serve.cli import main
from jupyter_serve.kernel.client import ServerInfo
from jupyter_serve.server.models import RegisterParams
from jupyter_serve.server.ts_config import read_properties

SETTINGS = ("minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "responseTimeout",
            "startupTimeout")  # fmt: skip


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path, snapshots=True)


async def serve_models(serverapp: Any, tmp_path: Path) -> None:
    """two 1.0 (the default) and 2.0, a batched model, a folder model, one whose files go."""
    registry, store = serve_state(serverapp)
    await register(serverapp, "two", "1.0", workers=1)
    await register(serverapp, "two", "2.0", workers=0)
    registry.set_default("two", "1.0")
    await register(serverapp, "batched", workers=2, batch_size=4, max_batch_delay_ms=50)
    (tmp_path / "probe.py").write_text(PROBE)
    for name in ("folder", "gone"):
        spec = ArchiveSpec(model_name=name, version="3.0", handler=str(tmp_path / "probe.py"),
                           export_path=str(store), archive_format="no-archive")  # fmt: skip
        build_mar(spec)
        await registry.register(name, RegisterParams(initial_workers=1))
    shutil.rmtree(store / "gone")


async def export(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, ["export", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def described(registry: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (model["modelName"], model["modelVersion"]): model
        for entry in registry.list_models()["models"]
        for model in registry.describe(entry["modelName"], "all")
    }


async def test_export_of_a_server_and_its_way_back(
    jp_serverapp: Any, live_server: ServerInfo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await serve_models(jp_serverapp, tmp_path)
    registry, store = serve_state(jp_serverapp)
    dest = tmp_path / "exported"
    code, out, err = await export(capsys, str(dest), "--url", live_server.url,
                                  "--token", live_server.token)  # fmt: skip
    assert code == 2, err  # exported, with one model left out
    assert err == (
        "Not exported: gone 3.0: the server refused its archive: The files of model gone "
        "version 3.0 are gone: gone (neither the archive nor its extracted folder is left)\n"
    )
    assert f"Exported 4 model versions to {dest}:" in out
    assert "  two 1.0 (default): model-store/two-1.0.mar" in out
    files = sorted(path.name for path in (dest / "model-store").iterdir())
    assert files == ["batched.mar", "folder.mar", "two-1.0.mar", "two-2.0.mar"]
    assert (dest / "model-store" / "two-2.0.mar").read_bytes() == (
        store / "two-2.0.mar"
    ).read_bytes()  # copied as it was
    packed = inspect_archive(dest / "model-store" / "folder.mar")
    assert packed.manifest is not None
    assert (packed.manifest.model.model_version, packed.manifest.model.handler) == (
        "3.0",
        "probe.py",
    )

    before = described(registry)
    snapshot = json.loads(read_properties(dest / "config/config.properties")["model_snapshot"])
    for (name, version), model in before.items():
        if name != "gone":
            entry = snapshot["models"][name][version]
            assert [entry[key] for key in SETTINGS] == [model[key] for key in SETTINGS]
    assert snapshot["models"]["two"]["1.0"]["defaultVersion"] is True
    validate_inference_service(yaml.safe_load((dest / "inferenceservice.yaml").read_text()))
    assert "- **gone 3.0: the server refused" in (dest / "README.md").read_text()

    config = ["--ts-config", str(dest / "config/config.properties")]
    back = ServeProcess(
        tmp_path / "back", args=[*config, "--model-store", str(dest / "model-store")]
    )
    try:
        back.start()
        with back.client() as http:
            for (name, version), model in before.items():
                if name == "gone":
                    continue
                [again] = http.get(f"models/{name}/{version}").json()
                assert [again[key] for key in SETTINGS] == [model[key] for key in SETTINGS]
            assert http.get("models/two").json()[0]["modelVersion"] == "1.0"  # the default
            answer = http.post("predictions/batched", json={"x": [1, 2]})
            assert answer.json() == {"x": [1, 2]}
    finally:
        back.kill()


async def test_models_picks_and_names_what_is_not_there(
    jp_serverapp: Any, live_server: ServerInfo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await register(jp_serverapp, "two", "1.0", workers=0)
    await register(jp_serverapp, "other", workers=0)
    server = ["--url", live_server.url, "--token", live_server.token]
    code, _, err = await export(capsys, str(tmp_path / "out"), "--models", "two,ghost",
                                  "--protocol", "v2", *server)  # fmt: skip
    assert (code, err) == (2, "Not exported: ghost: not registered\n")
    assert [p.name for p in (tmp_path / "out" / "model-store").iterdir()] == ["two.mar"]
    service = yaml.safe_load((tmp_path / "out" / "inferenceservice.yaml").read_text())
    assert service["spec"]["predictor"]["model"]["protocolVersion"] == "v2"

    code, _, err = await export(capsys, str(tmp_path / "out"), *server)
    assert code == 1
    assert err.startswith(f"jupyter serve export: {tmp_path / 'out'} is not empty")
    code, _, _ = await export(capsys, str(tmp_path / "out"), "--force", *server)
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "out" / "model-store").iterdir()) == [
        "other.mar", "two.mar",
    ]  # fmt: skip


async def test_export_of_a_snapshot_file(
    jp_serverapp: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await serve_models(jp_serverapp, tmp_path)
    registry, store = serve_state(jp_serverapp)
    snapshot_args = ["--snapshot", str(registry.snapshot_path), "--model-store", str(store)]
    code, _, err = await export(capsys, str(tmp_path / "out"), *snapshot_args)
    assert code == 2
    assert err.startswith("Not exported: gone 3.0: its files are gone: ")
    files = sorted(path.name for path in (tmp_path / "out" / "model-store").iterdir())
    assert files == ["batched.mar", "folder.mar", "two-1.0.mar", "two-2.0.mar"]
    assert (tmp_path / "out" / "model-store" / "batched.mar").read_bytes() == (
        store / "batched-1.0.mar"
    ).read_bytes()
    snapshot = json.loads(
        read_properties(tmp_path / "out/config/config.properties")["model_snapshot"]
    )
    batched = snapshot["models"]["batched"]["1.0"]
    assert (batched["batchSize"], batched["maxBatchDelay"], batched["minWorkers"]) == (4, 50, 2)


@pytest.fixture
def shell(live_server: ServerInfo) -> Iterator[InteractiveShell]:
    with magic_shell(live_server) as ip:
        yield ip


async def test_serve_export_magic(
    shell: InteractiveShell, jp_serverapp: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await register(jp_serverapp, "two", "1.0", workers=0)
    dest = tmp_path / "from notebook"
    result = await asyncio.to_thread(shell.run_line_magic, "serve", f"export '{dest}'")
    assert f"Exported 1 model version to {dest}:" in capsys.readouterr().out
    assert [e.mar for e in result.exported] == ["two.mar"]
    again = await asyncio.to_thread(shell.run_line_magic, "serve", f"export '{dest}'")
    assert again is None
    assert capsys.readouterr().out.startswith(f"Export failed: {dest} is not empty")
