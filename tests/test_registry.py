"""Tests for jupyter_serve.server.registry with real worker processes serving a tiny echo .mar."""

from __future__ import annotations

import asyncio
import functools
import http.server
import json
import logging
import threading
import zipfile
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jupyter_serve.archive import ArchiveSpec, build_mar
from jupyter_serve.server.models import RegisterParams
from jupyter_serve.server.registry import (
    Model,
    ModelRegistry,
    RegistryConfig,
    read_snapshot,
    snapshot_items,
)
from jupyter_serve.wire.errors import (
    BadRequest,
    ConflictStatus,
    DownloadArchive,
    InvalidModelVersion,
    ModelNotFound,
    ModelVersionNotFound,
    OutOfResources,
    ServeError,
)
from jupyter_serve.wire.protocol import InferenceRequest, Parameter

T = TypeVar("T")
HANG_GUARD = 60.0  # seconds; only stops a broken registry from hanging the suite
ECHO = (
    'def handle(data, context):\n    return [row.get("body") for row in data] if data else None\n'
)
BROKEN = "def handle(data, context):\n    raise RuntimeError('cannot load')\n"
OUT_OF_MEMORY = "def handle(data, context):\n    raise MemoryError('no room')\n"
USES_DEP = (
    "import tinydep\n\n"
    "def handle(data, context):\n"
    "    return [tinydep.VERSION for _ in data] if data else None\n"
)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, HANG_GUARD))


def build(store: Path, name: str, version: str = "1.0", source: str = ECHO, **kw: Any) -> str:
    """Build `<name>.mar` (or another format) into `store`; return its file name."""
    store.mkdir(parents=True, exist_ok=True)
    src = store.parent / f"src-{name}-{version}"
    src.mkdir(parents=True, exist_ok=True)
    (src / "echo.py").write_text(source)
    spec = ArchiveSpec(
        model_name=name, handler=str(src / "echo.py"), version=version, export_path=str(store), **kw
    )
    return build_mar(spec).name


@pytest.fixture
def store(tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    folder.mkdir()
    return folder


@pytest.fixture
def make_registry(tmp_path: Path, store: Path) -> Callable[..., ModelRegistry]:
    def make(**changes: Any) -> ModelRegistry:
        return ModelRegistry(RegistryConfig(store, tmp_path / "work", **changes))

    return make


def params(**values: Any) -> RegisterParams:
    return RegisterParams(response_timeout=30, startup_timeout=30, **values)


async def predict(model: Model, text: str) -> bytes:
    request = InferenceRequest("r1", {}, (Parameter("body", "text/plain", text.encode()),))
    deadline = asyncio.get_running_loop().time() + 30
    return (await model.batcher.submit(request, deadline)).body


def test_register_predict_scale_describe_unregister(
    store: Path, make_registry: Callable[..., ModelRegistry]
) -> None:
    url = build(store, "echo")
    registry = make_registry()

    async def scenario() -> None:
        status, message = await registry.register(url, params(initial_workers=1))
        assert (status, message) == (
            200,
            'Model "echo" Version: 1.0 registered with 1 initial workers',
        )
        model = registry.get("echo")
        assert Path(model.spec.model_dir).parent == registry.config.workdir / "echo"
        assert await predict(model, "hello") == b"hello"
        assert registry.healthy()
        assert await registry.scale("echo", None, 2, 3, True) == (
            200,
            "Workers scaled to 2 for model: echo",
        )
        assert await registry.scale("echo", "1.0", 1, 1, True) == (
            200,
            "Workers scaled to 1 for model: echo, version: 1.0",
        )
        [described] = registry.describe("echo")
        assert described["modelName"] == "echo"
        assert described["modelUrl"] == url
        assert (described["minWorkers"], described["maxWorkers"]) == (1, 1)
        assert described["jobQueueStatus"] == {"remainingCapacity": 100, "pendingRequests": 0}
        assert described["maxBatchDelay"] == 100
        assert "status" not in described  # as TorchServe 0.12: never set
        assert "deviceIds" not in described  # null (no GPUs named) is left out
        [worker] = described["workers"]
        assert worker["status"] == "READY"
        assert worker["gpuUsage"] == "N/A"
        assert {"deviceType", "parallelType", "loadedAtStartup", "clientTimeoutInMills"} <= set(
            described
        )
        processes = model.pool.processes
        assert await registry.unregister("echo") == (200, 'Model "echo" unregistered')
        assert all(process.returncode is not None for process in processes)
        assert not Path(model.spec.model_dir).exists()
        with pytest.raises(ModelNotFound, match=r"^Model not found: echo$"):
            registry.get("echo")

    run(scenario())


@pytest.mark.parametrize(
    ("url", "error", "message"),
    [
        ("", ModelNotFound, "empty url"),
        ("../fake.mar", ModelNotFound, "Relative path is not allowed in url: ../fake.mar"),
        ("missing.mar", ModelNotFound, "Model not found at: missing.mar"),
        (
            "https://example.com/x.mar",
            ModelNotFound,
            "Given URL https://example.com/x.mar does not match any allowed URL(s)",
        ),
        (
            "http://localhost:aaaa/x.mar",
            DownloadArchive,
            "Failed to download archive from: http://localhost:aaaa/x.mar",
        ),
    ],
)
def test_register_refuses_bad_urls(
    make_registry: Callable[..., ModelRegistry], url: str, error: type[ServeError], message: str
) -> None:
    registry = make_registry(allowed_urls=(r"http://localhost.*",))
    with pytest.raises(error) as raised:
        run(registry.register(url))
    assert raised.value.message == message
    assert registry.list_models() == {"models": []}


def test_same_version_twice_is_a_conflict_and_leaves_nothing_behind(
    store: Path, make_registry: Callable[..., ModelRegistry]
) -> None:
    url = build(store, "noop")
    registry = make_registry()
    assert run(registry.register(url)) == (
        200,
        'Model "noop" Version: 1.0 registered with 0 initial workers. '
        "Use scale workers API to add workers for the model.",
    )
    with pytest.raises(ConflictStatus) as raised:
        run(registry.register(url))
    assert raised.value.message == "Model version 1.0 is already registered for model noop"
    extracted = list((registry.config.workdir / "noop").iterdir())
    assert len(extracted) == 1  # the refused copy was removed
    assert not any((registry.config.workdir / ".incoming").iterdir())


def test_versions_default_and_their_errors(
    store: Path, make_registry: Callable[..., ModelRegistry]
) -> None:
    first, second = build(store, "m", "1.0"), build(store / "v2", "m", "2.0")
    registry = make_registry()

    async def scenario() -> None:
        await registry.register(first)
        await registry.register(str(store / "v2" / second))
        assert registry.default_version("m") == "1.0"
        assert [d["modelVersion"] for d in registry.describe("m", "all")] == ["1.0", "2.0"]
        with pytest.raises(ModelVersionNotFound, match=r"^Model version: 9 does not exist for"):
            registry.get("m", "9")
        with pytest.raises(ModelVersionNotFound) as raised:
            registry.set_default("m", "9")
        assert raised.value.message == "Model version 9 does not exist for model m"
        with pytest.raises(InvalidModelVersion) as forbidden:
            await registry.unregister("m")
        assert forbidden.value.status_code == 403
        assert forbidden.value.message == "Cannot remove default version for model m"
        assert registry.set_default("m", "2.0") == (
            200,
            'Default version successfully updated for model "m" to "2.0"',
        )
        assert await registry.unregister("m", "1.0") == (200, 'Model "m" unregistered')
        assert registry.get("m").version == "2.0"

    run(scenario())


def test_list_models_pages_by_name(
    store: Path, make_registry: Callable[..., ModelRegistry]
) -> None:
    registry = make_registry(snapshots=False)
    for name in ("c", "a", "b"):
        run(registry.register(build(store, name)))
    assert registry.list_models(2) == {
        "nextPageToken": "2",
        "models": [
            {"modelName": "a", "modelUrl": "a.mar"},
            {"modelName": "b", "modelUrl": "b.mar"},
        ],
    }
    assert registry.list_models(2, 2) == {"models": [{"modelName": "c", "modelUrl": "c.mar"}]}
    assert len(registry.list_models(500, -3)["models"]) == 3
    assert not registry.snapshot_path.exists()


def test_failed_start_unregisters_and_scale_failure_is_500(
    store: Path, make_registry: Callable[..., ModelRegistry]
) -> None:
    url = build(store, "broken", source=BROKEN)
    registry = make_registry()

    async def scenario() -> None:
        with pytest.raises(ServeError) as raised:
            await registry.register(url, params(initial_workers=1))
        assert raised.value.status_code == 500
        assert raised.value.message == "Failed to start workers for model broken version: 1.0"
        assert raised.value.to_json()["cause"] == "RuntimeError: cannot load"
        with pytest.raises(ModelNotFound):
            registry.get("broken")
        assert not (registry.config.workdir / "broken").exists() or not any(
            (registry.config.workdir / "broken").iterdir()
        )
        await registry.register(url, params())
        with pytest.raises(BadRequest, match=r"^max_worker cannot be less than min_worker\.$"):
            await registry.scale("broken", None, 2, 1, True)
        with pytest.raises(ServeError) as failed:
            await registry.scale("broken", None, 1, 1, True)
        assert failed.value.message == "Failed to start workers for model broken version: null"
        assert registry.healthy()  # failing for less than maxRetryTimeoutInSec, as TorchServe
        model = registry.get("broken")
        model.pool.spec = model.spec = model.spec.with_changes(max_retry_timeout=0)
        assert not registry.healthy()
        assert await registry.unregister("broken") == (200, 'Model "broken" unregistered')
        with pytest.raises(ModelNotFound, match=r"^Model not found: nope$"):
            await registry.scale("nope", None, 1, 1, True)

    run(scenario())


def test_async_register_and_scale_answer_202(
    store: Path, make_registry: Callable[..., ModelRegistry]
) -> None:
    url = build(store, "echo")
    registry = make_registry()

    async def scenario() -> None:
        status = await registry.register(url, params(initial_workers=1), synchronous=False)
        assert status == (202, "Processing worker updates...")
        model = registry.get("echo")
        await model.pool.wait_until(lambda pool: pool.healthy_count == 1)
        assert await predict(model, "later") == b"later"
        assert await registry.scale("echo", None, 0) == (202, "Processing worker updates...")
        await registry.shutdown()
        assert model.batcher.closed
        assert not model.pool.processes
        assert not Path(model.spec.model_dir).exists()
        assert registry.list_models() == {"models": []}
        assert read_snapshot(registry.snapshot_path)  # shutdown keeps the snapshot

    run(scenario())


def test_folder_and_tgz_archives(store: Path, make_registry: Callable[..., ModelRegistry]) -> None:
    folder = build(store, "plain", archive_format="no-archive")
    tgz = build(store, "packed", archive_format="tgz")
    registry = make_registry()

    async def scenario() -> None:
        await registry.register(folder, params(initial_workers=1))
        await registry.register(tgz, params(initial_workers=1))
        assert registry.get("plain").spec.model_dir == str(store / folder)
        assert await predict(registry.get("packed"), "tgz") == b"tgz"
        await registry.unregister("plain")
        await registry.unregister("packed")
        assert (store / folder).is_dir()  # used in place: not ours to delete

    run(scenario())


def test_snapshot_restores_versions_defaults_and_workers(
    store: Path, make_registry: Callable[..., ModelRegistry]
) -> None:
    url, other = build(store, "echo", "1.0"), build(store / "v2", "echo", "2.0")
    registry = make_registry()

    async def first_life() -> None:
        await registry.register(url, params(initial_workers=1, batch_size=2))
        await registry.register(str(store / "v2" / other))
        registry.set_default("echo", "2.0")
        await registry.scale("echo", "1.0", 1, 2, True)
        await registry.shutdown()

    run(first_life())
    data = json.loads(registry.snapshot_path.read_text())
    entry = data["models"]["echo"]["1.0"]
    assert data["modelCount"] == 2
    assert entry["marName"] == "echo.mar"
    assert (entry["minWorkers"], entry["maxWorkers"], entry["batchSize"]) == (1, 2, 2)
    assert data["models"]["echo"]["2.0"]["defaultVersion"] is True
    assert entry["jupyterServe"]["deviceType"] == "cpu"  # what export --snapshot reads
    assert next(item.url for item in read_snapshot(registry.snapshot_path)) == url
    fresh = make_registry()

    async def second_life() -> None:
        assert sorted(await fresh.restore()) == [("echo", "1.0"), ("echo", "2.0")]
        assert fresh.default_version("echo") == "2.0"
        restored = fresh.get("echo", "1.0")
        assert (restored.spec.min_workers, restored.spec.max_workers) == (1, 2)
        assert restored.pool.healthy_count == 1
        assert restored.spec.batch_size == 2
        assert restored.loaded_at_startup
        assert await predict(restored, "back") == b"back"
        await fresh.shutdown()

    run(second_life())


def test_restore_logs_models_it_cannot_bring_back(
    store: Path, make_registry: Callable[..., ModelRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    url = build(store, "gone")
    registry = make_registry()
    run(registry.register(url))
    (store / url).unlink()
    fresh = make_registry()
    with caplog.at_level(logging.ERROR, logger="jupyter_serve.server.registry.registry"):
        assert run(fresh.restore()) == []
    assert "Restoring model gone from gone.mar failed" in caplog.text
    assert all(record.exc_info is None for record in caplog.records)  # one line, no traceback
    assert fresh.list_models() == {"models": []}


def test_a_model_that_cannot_come_back_keeps_its_snapshot_entry(
    store: Path, make_registry: Callable[..., ModelRegistry]
) -> None:
    gone, kept = build(store, "gone"), build(store, "kept")
    registry = make_registry()
    run(registry.register(gone))
    run(registry.register(kept))
    archive = (store / gone).read_bytes()
    (store / gone).unlink()
    fresh = make_registry()
    assert run(fresh.restore()) == [("kept", "1.0")]
    run(fresh.unregister("kept"))  # a change writes the snapshot again
    assert [item.name for item in read_snapshot(fresh.snapshot_path)] == ["gone"]
    (store / gone).write_bytes(archive)  # the archive is back: so is the model
    later = make_registry()
    assert run(later.restore()) == [("gone", "1.0")]


@pytest.fixture
def http_store(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served over http on 127.0.0.1, and its base url."""
    folder = tmp_path / "remote"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_allowed_url_is_downloaded_into_the_store_and_removed_on_unregister(
    store: Path, make_registry: Callable[..., ModelRegistry], http_store: tuple[Path, str]
) -> None:
    remote, base = http_store
    name = build(remote, "fetched")
    registry = make_registry(allowed_urls=(r"http://127\.0\.0\.1:\d+/.*",))
    url = f"{base}/{name}"

    async def scenario() -> None:
        await registry.register(url, params(initial_workers=1))
        assert (store / name).is_file()
        model = registry.get("fetched")
        assert model.spec.model_url == url
        assert await predict(model, "net") == b"net"
        [item] = read_snapshot(registry.snapshot_path)
        assert item.url == str(store / name)  # a restore does not download again
        with pytest.raises(DownloadArchive, match=r"^Failed to download archive from: "):
            await registry.register(f"{base}/missing.mar")
        await registry.unregister("fetched")
        assert not (store / name).exists()

    run(scenario())


def test_out_of_memory_at_load_is_507(
    store: Path, make_registry: Callable[..., ModelRegistry]
) -> None:
    url = build(store, "hungry", source=OUT_OF_MEMORY)
    registry = make_registry()
    with pytest.raises(ServeError) as raised:
        run(registry.register(url, params(initial_workers=1)))
    assert raised.value.status_code == 507
    assert isinstance(raised.value, OutOfResources)
    assert raised.value.message == "Failed to start workers for model hungry version: 1.0"


def test_model_name_cannot_leave_the_workdir(
    store: Path, make_registry: Callable[..., ModelRegistry], tmp_path: Path
) -> None:
    url = build(store, "echo")
    registry = make_registry()
    with pytest.raises(BadRequest, match="special characters"):
        run(registry.register(url, params(model_name="../evil")))
    assert not (tmp_path / "evil").exists()
    assert not any((registry.config.workdir / ".incoming").iterdir())


def test_requirements_are_installed_per_model(
    store: Path, make_registry: Callable[..., ModelRegistry], tmp_path: Path
) -> None:
    extras = tmp_path / "extras"
    extras.mkdir()
    wheel = extras / "tinydep-0.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        info = "tinydep-0.3.dist-info"
        archive.writestr("tinydep/__init__.py", "VERSION = '0.3'\n")
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tinydep\nVersion: 0.3\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    requirements = extras / "requirements.txt"
    requirements.write_text(f"--no-index\n./{wheel.name}\n")
    url = build(
        store,
        "withdep",
        source=USES_DEP,
        requirements_file=str(requirements),
        extra_files=(str(wheel),),
    )
    registry = make_registry(install_py_dep_per_model=True)

    async def scenario() -> None:
        await registry.register(url, params(initial_workers=1))
        model = registry.get("withdep")
        deps = registry.config.workdir / "withdep" / "deps-1.0"
        assert model.spec.python_path == (str(deps),)
        assert (deps / "tinydep" / "__init__.py").is_file()
        assert await predict(model, "x") == b"0.3"
        await registry.shutdown()

    run(scenario())


def test_concurrent_registers_of_one_version_conflict(
    store: Path, make_registry: Callable[..., ModelRegistry]
) -> None:
    url = build(store, "twice")
    registry = make_registry()

    async def scenario() -> list[Any]:
        return await asyncio.gather(
            registry.register(url), registry.register(url), return_exceptions=True
        )

    outcomes = run(scenario())
    assert sum(isinstance(outcome, ConflictStatus) for outcome in outcomes) == 1
    assert [d["modelVersion"] for d in registry.describe("twice", "all")] == ["1.0"]


@pytest.mark.parametrize("data", [[], {"models": []}, {"models": {"m": {"1.0": 3}}}])
def test_snapshot_items_refuse_what_is_no_snapshot(data: object) -> None:
    with pytest.raises(ValueError, match="model_snapshot of x is not a model snapshot"):
        snapshot_items(data, "model_snapshot of x")


def test_snapshot_items_of_a_config_snapshot_register_the_mar_name() -> None:
    entry = {"defaultVersion": True, "marName": "m-2.0.mar", "minWorkers": 2, "batchSize": 4}
    (item,) = snapshot_items({"models": {"m": {"2.0": entry}}})
    assert (item.url, item.name, item.version, item.default) == ("m-2.0.mar", "m", "2.0", True)
    assert (item.min_workers, item.max_workers, item.params.batch_size) == (2, 2, 4)
