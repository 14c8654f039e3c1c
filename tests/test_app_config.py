"""ServeApp configuration: config.properties precedence, startup models, snapshot restore.

The server is pytest-jupyter's; its ServeApp traits come from the local
`jp_server_config` (a config.properties, explicit traits, a tmp workdir).
pytest-jupyter does not run the extension's start hook, so the tests await
`start_models()` (or the hook itself) directly. Models are tiny echo archives
served by real worker processes (no torch: they start in well under a second).
"""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from mar_builder import build_handler_mar

from jupyter_serve.server.app import ServeApp, server_workdir
from jupyter_serve.server.app_config import ServeAppTraits
from jupyter_serve.server.models import RegisterParams
from jupyter_serve.server.startup import model_identity, startup_workers

ECHO = (
    'def handle(data, context):\n    return [row.get("body") for row in data] if data else None\n'
)
MODELS_JSON = {"second": {"2.0": {"batchSize": 3, "maxBatchDelay": 7, "responseTimeout": 9}}}
PLAIN = "plain"  # serve_traits without a config.properties
HANG_GUARD = 60.0  # seconds; only stops a broken start from hanging the suite


def build(store: Path, name: str, version: str = "1.0", config: str | None = None) -> str:
    """`<name>.mar` with this module's handler (and a model-config.yaml) in `store`."""
    return build_handler_mar(store, name, ECHO, version=version, module="echo", config=config)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    folder.mkdir()
    build(folder, "echo")
    build(folder, "second", "2.0")
    build(folder, "pair", config="minWorkers: 2\nmaxWorkers: 3\n")
    return folder


@pytest.fixture
def properties(request: pytest.FixtureRequest, tmp_path: Path, store: Path) -> Path:
    """The config.properties; a `param` is a `model_snapshot` to add (its archives built)."""
    path = tmp_path / "config.properties"
    snapshot = getattr(request, "param", None)
    if snapshot is not None:
        (store / "second.mar").rename(store / "second-2.0.mar")
        build(store, "second", "1.0")
        (store / "second.mar").rename(store / "second-1.0.mar")
        (store / "second-2.0.mar").rename(store / "second.mar")
    lines = [
        f"model_store={store}",
        "load_models=echo.mar,second.mar",
        "models=" + json.dumps(MODELS_JSON),
        "default_workers_per_model=0",
        "job_queue_size=7",
        "max_request_size=1234",
        "default_response_timeout=33",
        "default_startup_timeout=44",
        "install_py_dep_per_model=false",
        "allowed_urls=https://models\\\\.example/.*",
        "enable_model_api=false",
        "decode_input_request=false",
        "limit_max_image_pixels=false",
        "inference_address=http://0.0.0.0:8080",
    ]
    if snapshot is not None:
        lines.append("model_snapshot=" + json.dumps(snapshot))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def serve_traits(
    request: pytest.FixtureRequest, tmp_path: Path, store: Path, properties: Path
) -> dict[str, Any]:
    """ServeApp traits: the properties file (plus `param` traits), or PLAIN traits."""
    param = getattr(request, "param", {})
    if param == PLAIN:
        return {
            "workdir": str(tmp_path / "work"),
            "model_store": str(store),
            "load_models": ["echo.mar", "renamed=second.mar"],
        }
    return {
        "workdir": str(tmp_path / "work"),
        "ts_config": str(properties),
        "job_queue_size": 11,  # explicit: wins over the properties' 7
        **param,
    }


@pytest.fixture
def jp_server_config(serve_traits: dict[str, Any]) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_serve": True}},
        "ServeApp": {"fork_workers": False, **serve_traits},
    }


@pytest.fixture
def serve(jp_serverapp: Any) -> ServeApp:
    app: ServeApp = jp_serverapp.web_app.settings["serve_app"]
    return app


async def start(serve: ServeApp) -> list[tuple[str, str]]:
    return await asyncio.wait_for(serve.start_models(), HANG_GUARD)


def test_config_properties_fill_the_traits_not_set_explicitly(serve: ServeApp, store: Path) -> None:
    assert serve.job_queue_size == 11
    assert serve.model_store == str(store)
    assert serve.load_models == ["echo.mar", "second.mar"]
    assert serve.models == MODELS_JSON
    assert (serve.max_request_size, serve.response_timeout, serve.startup_timeout) == (
        1234,
        33.0,
        44.0,
    )
    assert serve.allowed_urls == ["https://models\\.example/.*"]
    assert serve.enable_model_api is False
    defaults = serve.registry.config.defaults
    assert (defaults.job_queue_size, defaults.response_timeout) == (11, 33.0)
    assert defaults.decode_input_request is False
    assert defaults.limit_max_image_pixels is False
    assert serve.registry.config.allowed_urls == ("https://models\\.example/.*",)
    assert serve.startup_plan().restore is False  # as `torchserve --ts-config`


def test_jupyter_server_hands_on_every_serveapp_setting(jp_serverapp: Any, serve: ServeApp) -> None:
    """`jupyter_serve_config`, jupyter_server's copy of an extension's own traits, has every
    setting although app_config.py declares them (see `ServeApp.class_own_traits`)."""
    published = jp_serverapp.web_app.settings["jupyter_serve_config"]
    assert set(published) >= set(ServeAppTraits.class_traits(config=True))
    assert (published["job_queue_size"], published["workdir"]) == (11, serve.workdir)


async def test_startup_models_get_models_json_settings_and_one_worker(serve: ServeApp) -> None:
    assert sorted(await start(serve)) == [("echo", "1.0"), ("second", "2.0")]
    [echo] = serve.registry.describe("echo")
    [second] = serve.registry.describe("second")
    assert (echo["minWorkers"], len(echo["workers"]), echo["loadedAtStartup"]) == (1, 1, True)
    assert (second["batchSize"], second["maxBatchDelay"], second["responseTimeout"]) == (3, 7, 9)
    assert echo["responseTimeout"] == 33  # default_response_timeout of the properties
    assert [worker["status"] for worker in second["workers"]] == ["READY"]


def _version(mar: str, default: bool, workers: int, batch: int = 1) -> dict[str, Any]:
    return {"defaultVersion": default, "marName": mar, "minWorkers": workers,
            "maxWorkers": workers + 1, "batchSize": batch, "maxBatchDelay": 25 * batch,
            "responseTimeout": 17, "startupTimeout": 30}  # fmt: skip


# What `jupyter serve export` writes: two versions of "second", the older one the default.
SNAPSHOT = {
    "name": "export",
    "modelCount": 3,
    "models": {
        "echo": {"1.0": _version("echo.mar", True, 2, batch=4)},
        "second": {
            "1.0": _version("second-1.0.mar", True, 1),
            "2.0": _version("second.mar", False, 0),
        },
    },
}


@pytest.mark.parametrize("properties", [SNAPSHOT], indirect=True)
async def test_a_model_snapshot_in_config_properties_is_restored_instead_of_load_models(
    serve: ServeApp,
) -> None:
    assert await start(serve) == [("echo", "1.0"), ("second", "1.0"), ("second", "2.0")]
    [echo] = serve.registry.describe("echo")
    settings = ("minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "responseTimeout")
    assert [echo[key] for key in settings] == [2, 3, 4, 100, 17]
    assert (echo["startupTimeout"], len(echo["workers"])) == (30, 2)
    assert serve.registry.default_version("second") == "1.0"  # not the latest
    described = {model["modelVersion"]: model for model in serve.registry.describe("second", "all")}
    assert [described["2.0"][key] for key in settings] == [0, 1, 1, 25, 17]
    assert serve.registry.list_models()["models"] == [
        {"modelName": "echo", "modelUrl": "echo.mar"},
        {"modelName": "second", "modelUrl": "second-1.0.mar"},
    ]  # load_models (echo.mar, second.mar) is not read: the snapshot says it all


@pytest.mark.parametrize(
    "serve_traits", [{"load_models": ["all"], "default_workers_per_model": 0}], indirect=True
)
async def test_all_loads_every_archive_and_the_yaml_sets_workers(serve: ServeApp) -> None:
    assert sorted(await start(serve)) == [("echo", "1.0"), ("pair", "1.0"), ("second", "2.0")]
    [pair] = serve.registry.describe("pair")
    assert (pair["minWorkers"], pair["maxWorkers"], len(pair["workers"])) == (2, 3, 2)


@pytest.mark.parametrize("serve_traits", [PLAIN], indirect=True)
async def test_snapshot_comes_back_first_and_startup_names_already_there_are_skipped(
    serve: ServeApp,
) -> None:
    await serve.registry.register("echo.mar", RegisterParams(initial_workers=2))
    await serve.registry.shutdown()  # the snapshot stays: a server that stopped
    assert serve.startup_plan().restore is True
    started = await start(serve)
    assert started == [("echo", "1.0"), ("renamed", "2.0")]  # echo once: from the snapshot
    restored = serve.registry.get("echo")
    assert (restored.pool.worker_count, restored.loaded_at_startup) == (2, True)
    assert serve.registry.get("renamed").pool.worker_count == 1


@pytest.mark.parametrize("serve_traits", [PLAIN], indirect=True)
async def test_start_hook_runs_in_the_background_and_a_bad_entry_is_skipped(
    serve: ServeApp, jp_serverapp: Any
) -> None:
    serve.load_models = ["missing=nothing.mar", *serve.load_models]
    await serve._start_jupyter_server_extension(jp_serverapp)
    assert serve.startup_task is not None
    started = await asyncio.wait_for(serve.startup_task, HANG_GUARD)
    assert started == [("echo", "1.0"), ("renamed", "2.0")]


def test_model_identity_reads_the_manifest_else_the_url(store: Path) -> None:
    assert model_identity("second.mar", store) == ("second", "2.0")
    assert model_identity(str(store / "pair.mar"), store) == ("pair", "1.0")
    assert model_identity("https://host/path/remote.mar", store) == ("remote", None)
    assert model_identity("absent.tar.gz", store) == ("absent", None)
    (store / "broken.mar").write_bytes(b"PK\x03\x04 not a zip at all")
    (store / "bomb.mar").write_bytes(_manifest_too_large())
    assert model_identity("broken.mar", store) == ("broken", None)  # the register says why
    assert model_identity("bomb.mar", store) == ("bomb", None)


def _manifest_too_large() -> bytes:
    """A zip whose MAR-INF/MANIFEST.json is over the manifest size cap."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("MAR-INF/MANIFEST.json", " " * (4 << 20))
    return buffer.getvalue()


def test_startup_models_get_at_least_one_worker() -> None:
    assert [startup_workers(n) for n in (0, 1, 3)] == [1, 1, 3]


def test_each_root_directory_gets_its_own_default_workdir(tmp_path: Path) -> None:
    first = server_workdir(tmp_path, str(tmp_path / "a"))
    assert first == server_workdir(tmp_path, str(tmp_path / "a" / ".." / "a"))
    assert first != server_workdir(tmp_path, str(tmp_path / "b"))
    assert first.parent == tmp_path / "jupyter_serve" / "servers"
    assert first.name.startswith("a-")


class TestDefaultWorkdir:
    """Without a `workdir`, the server's own folder: two servers never share a snapshot."""

    @pytest.fixture
    def jp_server_config(self) -> dict[str, Any]:
        return {"ServerApp": {"jpserver_extensions": {"jupyter_serve": True}},
                "ServeApp": {"fork_workers": False}}  # fmt: skip

    def test_the_default_workdir_belongs_to_this_root(
        self, jp_serverapp: Any, jp_data_dir: Path, jp_root_dir: Path
    ) -> None:
        app = jp_serverapp.web_app.settings["serve_app"]
        assert Path(app.workdir) == server_workdir(jp_data_dir, str(jp_root_dir))
        assert app.registry.snapshot_path.parent == Path(app.workdir)


def test_metrics_config_trait_is_read_once_and_a_bad_file_is_a_trait_error(
    tmp_path: Path,
) -> None:
    from traitlets import TraitError

    from jupyter_serve.server.metrics.config import DEFAULT

    app = ServeApp()
    assert app.metrics_settings() is DEFAULT
    good = tmp_path / "metrics.yaml"
    good.write_text("model_metrics:\n  gauge:\n    - {name: Depth, unit: count, dimensions: []}\n")
    app.metrics_config = str(good)
    assert [decl.name for decl in app.metrics_settings().model_metrics] == ["Depth"]
    assert app.server_defaults().model_metrics == (
        {"name": "Depth", "unit": "count", "dimensions": [], "type": "gauge"},
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_metrics:\n  summary: []\n")
    app.metrics_config = str(bad)
    with pytest.raises(TraitError, match="invalid metric type 'summary'"):
        app.metrics_settings()
