"""Tests for jupyter_serve.server.http.management through jp_fetch, with real echo workers.

Each test's server gets its own model store and workdir (a local `jp_server_config`);
archives are built into the store with jupyter_serve.archive, as a user's would be.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from route_models import release_if_waiting
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_serve.archive import ArchiveSpec, build_mar
from jupyter_serve.server.pool import ScaleResult
from jupyter_serve.server.registry import ModelRegistry

Fetch = Callable[..., Awaitable[HTTPResponse]]
HANG_GUARD = 60.0  # seconds; only stops a broken route from hanging the suite
ECHO = """
SHAPES = {"text": "plain words", "list": [1, 2], "none": None, "empty": b""}


def _header(context, name):
    headers = context.get_all_request_header(0)
    return next((v for k, v in headers.items() if k.lower() == name), None)


def handle(data, context):
    if not data:
        return None
    if _header(context, "describe") == "True":
        shape = _header(context, "x-describe-as")
        if shape in SHAPES:
            return [SHAPES[shape]]
        asked_by = _header(context, "x-asked-by")
        credentials = [_header(context, name) for name in ("authorization", "cookie")]
        return [{"handler": "echo", "asked_by": asked_by, "id": context.get_request_id(0),
                 "credentials": [c for c in credentials if c]}]
    return [row.get("body") for row in data]
"""
BROKEN = "def handle(data, context):\n    raise RuntimeError('cannot load')\n"
ZERO_WORKERS = (
    "registered with 0 initial workers. Use scale workers API to add workers for the model."
)
DESCRIBE_KEYS = [  # in TorchServe 0.12's order
    "modelName",
    "modelVersion",
    "modelUrl",
    "runtime",
    "minWorkers",
    "maxWorkers",
    "batchSize",
    "maxBatchDelay",
    "responseTimeout",
    "startupTimeout",
    "maxRetryTimeoutInSec",
    "clientTimeoutInMills",
    "parallelType",
    "parallelLevel",
    "deviceType",
    "continuousBatching",
    "useJobTicket",
    "useVenv",
    "stateful",
    "sequenceMaxIdleMSec",
    "sequenceTimeoutMSec",
    "maxNumSequence",
    "maxSequenceJobQueueSize",
    "loadedAtStartup",
    "workers",
    "jobQueueStatus",
]  # fmt: skip  (TorchServe 0.12's keys for a CPU model: no null deviceIds, no status)
WORKER_KEYS = {"id", "startTime", "status", "memoryUsage", "pid", "gpu", "gpuUsage"}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    serve = {"workdir": str(tmp_path / "work"), "model_store": str(tmp_path / "store")}
    return {**jp_server_config, "ServeApp": {**jp_server_config["ServeApp"], **serve}}


@pytest.fixture
def serve_app(jp_serverapp: Any) -> Any:
    return jp_serverapp.web_app.settings["serve_app"]


@pytest.fixture
def registry(jp_serverapp: Any) -> ModelRegistry:
    found: ModelRegistry = jp_serverapp.web_app.settings["serve_registry"]
    return found


@pytest.fixture
def build(serve_app: Any, tmp_path: Path) -> Callable[..., str]:
    """Build `<name>.mar` (model `name`, `version`) into the server's model store."""

    def make(name: str, version: str = "1.0", source: str = ECHO, file: str | None = None) -> str:
        src = tmp_path / f"src-{name}-{version}"
        src.mkdir(parents=True, exist_ok=True)
        (src / "echo.py").write_text(source)
        spec = ArchiveSpec(
            model_name=name, handler=str(src / "echo.py"), version=version, export_path=str(src)
        )
        built = build_mar(spec)
        return built.rename(Path(serve_app.model_store) / f"{file or name}.mar").name

    return make


async def call(fetch: Fetch, method: str, *parts: str, **params: str) -> tuple[int, Any]:
    """(status, JSON body) of a request, errors included."""
    body = b"" if method in ("POST", "PUT") else None
    response = await fetch(
        "serve", *parts, method=method, body=body, params=params, raise_error=False
    )
    return response.code, json.loads(response.body)


async def register(fetch: Fetch, url: str, **params: str) -> tuple[int, Any]:
    return await call(fetch, "POST", "models", url=url, **params)


def error(code: int, kind: str, message: str) -> tuple[int, dict[str, Any]]:
    return code, {"code": code, "type": kind, "message": message}


NO_MODEL = error(404, "ModelNotFoundException", "Model not found: nope")
NO_VERSION = error(
    404, "ModelVersionNotFoundException", "Model version: 0.0 does not exist for model: echo"
)


# ---- register, describe, scale, unregister -------------------------------------------


async def test_register_describe_scale_unregister_with_a_real_worker(
    jp_fetch: Fetch, build: Callable[..., str], registry: ModelRegistry
) -> None:
    url = build("echo")
    assert await register(jp_fetch, url, initial_workers="1", synchronous="true") == (
        200,
        {"status": 'Model "echo" Version: 1.0 registered with 1 initial workers'},
    )
    status, described = await call(jp_fetch, "GET", "models", "echo")
    assert status == 200
    [model] = described
    assert list(model) == DESCRIBE_KEYS
    assert (model["modelName"], model["modelVersion"], model["modelUrl"]) == ("echo", "1.0", url)
    assert (model["minWorkers"], model["maxWorkers"], model["batchSize"]) == (1, 1, 1)
    [worker] = model["workers"]
    assert set(worker) >= WORKER_KEYS
    assert (worker["status"], worker["gpu"], worker["gpuUsage"]) == ("READY", False, "N/A")
    assert "customizedMetadata" not in model
    assert await call(jp_fetch, "GET", "models", "echo", "1.0") == (200, described)
    assert await call(jp_fetch, "GET", "models", "echo", "all") == (200, described)

    assert await call(jp_fetch, "PUT", "models", "echo", min_worker="2", synchronous="true") == (
        200,
        {"status": "Workers scaled to 2 for model: echo"},
    )
    assert registry.get("echo").pool.healthy_count == 2
    assert await call(
        jp_fetch, "PUT", "models", "echo", "1.0", min_worker="1", max_worker="3", synchronous="true"
    ) == (200, {"status": "Workers scaled to 1 for model: echo, version: 1.0"})
    [model] = (await call(jp_fetch, "GET", "models", "echo"))[1]
    assert (model["minWorkers"], model["maxWorkers"], len(model["workers"])) == (1, 3, 1)

    processes = registry.get("echo").pool.processes
    assert await call(jp_fetch, "DELETE", "models", "echo/", synchronous="nan") == (
        200,
        {"status": 'Model "echo" unregistered'},
    )
    assert all(process.returncode is not None for process in processes)
    assert await call(jp_fetch, "GET", "models", "echo") == error(
        404, "ModelNotFoundException", "Model not found: echo"
    )


async def test_scale_asynchronously_answers_202_and_the_workers_come(
    jp_fetch: Fetch, build: Callable[..., str], registry: ModelRegistry
) -> None:
    assert await register(jp_fetch, build("echo")) == (
        200,
        {"status": f'Model "echo" Version: 1.0 {ZERO_WORKERS}'},
    )
    for params in ({}, {"min_worker": "", "synchronous": "Nan"}, {"number_gpu": "10"},
                   {"timeout": "0"}, {"min_worker": "1"}):  # fmt: skip
        assert await call(jp_fetch, "PUT", "models", "echo", **params) == (
            202,
            {"status": "Processing worker updates..."},
        ), params
    pool = registry.get("echo").pool
    await asyncio.wait_for(pool.wait_until(lambda p: p.healthy_count == 1), HANG_GUARD)
    assert await call(jp_fetch, "PUT", "models", "echo", min_worker="0") == (
        202,
        {"status": "Processing worker updates..."},
    )
    await asyncio.wait_for(pool.wait_until(lambda p: p.worker_count == 0), HANG_GUARD)


async def test_register_asynchronously_answers_202_then_serves(
    jp_fetch: Fetch, build: Callable[..., str], registry: ModelRegistry
) -> None:
    url = build("echo")
    assert await register(jp_fetch, url, initial_workers="1", synchronous="false") == (
        202,
        {"status": "Processing worker updates..."},
    )
    pool = registry.get("echo").pool
    await asyncio.wait_for(pool.wait_until(lambda p: p.healthy_count == 1), HANG_GUARD)
    [model] = (await call(jp_fetch, "GET", "models", "echo"))[1]
    assert [worker["status"] for worker in model["workers"]] == ["READY"]


async def test_register_by_json_body_with_typed_values(
    jp_fetch: Fetch, build: Callable[..., str]
) -> None:
    url = build("echo")
    body = {"url": url, "model_name": "viajson", "batch_size": 3, "max_batch_delay": "7",
            "response_timeout": 30, "initial_workers": "0"}  # fmt: skip
    response = await jp_fetch(
        "serve", "models", method="POST", body=json.dumps(body),
        headers={"Content-Type": "application/json; charset=utf-8"},
    )  # fmt: skip
    assert json.loads(response.body) == {"status": f'Model "viajson" Version: 1.0 {ZERO_WORKERS}'}
    [model] = (await call(jp_fetch, "GET", "models", "viajson"))[1]
    assert (model["batchSize"], model["maxBatchDelay"], model["responseTimeout"]) == (3, 7, 30)
    assert model["minWorkers"] == 0


async def test_register_by_query_reads_junk_numbers_and_sentinels_as_torchserve(
    jp_fetch: Fetch, build: Callable[..., str]
) -> None:
    """TorchServe takes a number `Integer.parseInt` refuses as not given (its API tests
    register `batch_size=dd` with 200) and a negative `initial_workers` as none."""
    url = build("echo")
    for junk in ({"initial_workers": "999"}, {"model_name": ""}, {"batch_size": "0"}):
        status, body = await register(jp_fetch, url, **{"model_name": "junk", **junk})
        assert (status, body["type"]) == (400, "BadRequestException"), junk
        assert body["message"].startswith("Invalid value for"), body
    assert (await call(jp_fetch, "GET", "models"))[1] == {"models": []}  # nothing registered
    assert await register(
        jp_fetch, url, model_name="junk", response_timeout="0", runtime="python3",
        batch_size="dd", max_batch_delay="junk", initial_workers="-1",
    ) == (200, {"status": f'Model "junk" Version: 1.0 {ZERO_WORKERS}'})  # fmt: skip
    [model] = (await call(jp_fetch, "GET", "models", "junk"))[1]
    assert (model["batchSize"], model["maxBatchDelay"], model["responseTimeout"]) == (1, 100, 120)
    assert (model["runtime"], model["minWorkers"]) == ("python3", 0)
    assert await register(
        jp_fetch, url, model_name="sync", initial_workers="1", synchronous="-1"
    ) == (202, {"status": "Processing worker updates..."})


async def test_asynchronous_register_with_no_workers_is_200_as_torchserve(
    jp_fetch: Fetch, build: Callable[..., str]
) -> None:
    assert await register(jp_fetch, build("echo"), synchronous="false") == (
        200,
        {"status": f'Model "echo" Version: 1.0 {ZERO_WORKERS}'},
    )


async def test_register_errors(jp_fetch: Fetch, build: Callable[..., str]) -> None:
    url = build("echo")
    assert await register(jp_fetch, url) == (
        200,
        {"status": f'Model "echo" Version: 1.0 {ZERO_WORKERS}'},
    )
    cases: list[tuple[dict[str, str], tuple[int, dict[str, Any]]]] = [
        ({"url": url}, error(409, "ConflictStatusException",
                             "Model version 1.0 is already registered for model echo")),
        ({"url": "", "model_name": "x"}, error(404, "ModelNotFoundException", "empty url")),
        ({"url": url, "runtime": "python4"},
         error(400, "BadRequestException", "Invalid RuntimeType value: python4")),
        ({"url": "../fake.mar"}, error(404, "ModelNotFoundException",
                                       "Relative path is not allowed in url: ../fake.mar")),
        ({"url": "missing.mar"}, error(404, "ModelNotFoundException",
                                       "Model not found at: missing.mar")),
        ({"url": "https://example.com/x.mar"}, error(
            404, "ModelNotFoundException",
            "Given URL https://example.com/x.mar does not match any allowed URL(s)")),
    ]  # fmt: skip
    for params, expected in cases:
        assert await call(jp_fetch, "POST", "models", **params) == expected, params
    status, body = await register(jp_fetch, url, model_name="bad name!")
    assert (status, body["type"]) == (400, "InvalidModelException")
    assert await call(jp_fetch, "POST", "models") == error(
        400, "BadRequestException", "Parameter url is required."
    )
    response_error = await call(jp_fetch, "POST", "models", model_name="x")
    assert response_error[1]["message"] == "Parameter url is required."


async def test_malformed_json_body_is_a_bad_request(jp_fetch: Fetch) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch(
            "serve", "models", method="POST", body=b"[1]",
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
    assert caught.value.code == 400
    assert caught.value.response is not None
    assert json.loads(caught.value.response.body)["type"] == "BadRequestException"


async def test_an_empty_json_body_falls_back_to_query_args(
    jp_fetch: Fetch, build: Callable[..., str]
) -> None:
    url = build("echo")
    response = await jp_fetch(
        "serve", "models", method="POST", body=b"", params={"url": url},
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    assert response.code == 200


async def test_synchronous_scale_of_a_failing_handler_is_500(
    jp_fetch: Fetch, build: Callable[..., str]
) -> None:
    assert (await register(jp_fetch, build("broken", source=BROKEN)))[0] == 200
    why = {"cause": "RuntimeError: cannot load"}  # the handler's error, one line, beside
    status, body = await call(jp_fetch, "PUT", "models", "broken", min_worker="1",
                              synchronous="true")  # fmt: skip
    assert (status, body) == (500, {**error(
        500, "InternalServerException", "Failed to start workers for model broken version: null"
    )[1], **why})  # fmt: skip
    status, body = await register(jp_fetch, build("broken2", source=BROKEN), initial_workers="1")
    assert (status, body) == (500, {**error(
        500, "InternalServerException", "Failed to start workers for model broken2 version: 1.0"
    )[1], **why})  # fmt: skip


class PartialPool:
    """A pool whose new workers loaded yet none runs now (all restarting): scale answers 206."""

    healthy_count = 0
    worker_count = 0
    workers: list[dict[str, Any]] = []

    async def scale(
        self, min_workers: int, max_workers: int | None = None, *, wait: bool = True
    ) -> ScaleResult:
        return ScaleResult(min_workers, started=min_workers)

    async def stop(self) -> None:
        return None


async def test_synchronous_scale_with_too_few_serving_workers_is_206(
    jp_fetch: Fetch, build: Callable[..., str], registry: ModelRegistry
) -> None:
    assert (await register(jp_fetch, build("echo")))[0] == 200
    registry.get("echo").pool = PartialPool()  # type: ignore[assignment]
    assert await call(jp_fetch, "PUT", "models", "echo", min_worker="2", synchronous="true") == (
        206,
        {"status": "Workers scaling in progress..."},
    )


SLOW_SECOND_LOAD = """
import os


def handle(data, context):
    if not data:  # load: once ARMED exists, wait for GATE (a FIFO) to be written
        if os.path.exists({armed!r}):
            with open({gate!r}, "rb") as gate:
                gate.read()
        return None
    return [row.get("body") for row in data]
"""


async def test_synchronous_scale_counts_workers_still_starting_as_torchserve(
    jp_fetch: Fetch, build: Callable[..., str], registry: ModelRegistry, tmp_path: Path
) -> None:
    """TorchServe 0.12 answered 200 "Workers scaled to 2" to a synchronous scale while the
    second worker (asked for by an earlier asynchronous scale) was still loading."""
    armed, fifo = tmp_path / "armed", tmp_path / "gate"
    os.mkfifo(fifo)
    source = SLOW_SECOND_LOAD.format(armed=str(armed), gate=str(fifo))
    assert (await register(jp_fetch, build("slow", source=source), initial_workers="1"))[0] == 200
    armed.touch()
    try:
        assert await call(jp_fetch, "PUT", "models", "slow", min_worker="2") == (
            202, {"status": "Processing worker updates..."})  # fmt: skip
        starting = [w for w in registry.get("slow").pool.workers if w["status"] != "READY"]
        assert len(starting) == 1  # the second worker waits at the gate
        assert await call(jp_fetch, "PUT", "models", "slow", min_worker="2",
                          synchronous="true") == (
            200, {"status": "Workers scaled to 2 for model: slow"})  # fmt: skip
    finally:
        await release_if_waiting(fifo)


async def test_scale_errors(jp_fetch: Fetch, build: Callable[..., str]) -> None:
    assert (await register(jp_fetch, build("echo")))[0] == 200
    bad_count = "max_worker cannot be less than min_worker."
    cases: list[tuple[tuple[str, ...], dict[str, str], tuple[int, dict[str, Any]]]] = [
        (("echo",), {"min_worker": "2", "max_worker": "1"},
         error(400, "BadRequestException", bad_count)),
        (("echo",), {"max_worker": "-1"}, error(400, "BadRequestException", bad_count)),
        (("nope",), {"min_worker": "1"}, NO_MODEL),
        (("nope",), {"min_worker": "-1"}, NO_MODEL),
        (("echo", "0.0"), {"min_worker": "1", "synchronous": "true"}, NO_VERSION),
        (("echo",), {"model_version": "0.0"}, NO_VERSION),
    ]  # fmt: skip
    for parts, params, expected in cases:
        assert await call(jp_fetch, "PUT", "models", *parts, **params) == expected, (parts, params)
    for junk in ({"min_worker": "-1"}, {"max_worker": "999"}):
        status, body = await call(jp_fetch, "PUT", "models", "echo", **junk)
        assert (status, body["type"]) == (400, "BadRequestException"), junk
    [model] = (await call(jp_fetch, "GET", "models", "echo"))[1]
    assert model["minWorkers"] == 0  # nothing changed (registered without workers)
    # TorchServe's API tests: `min_worker=nan` is "not given", so the default (1): 202
    ok = (200, {"status": "Workers scaled to 1 for model: echo"})
    assert await call(jp_fetch, "PUT", "models", "echo", min_worker="nan", synchronous="true") == ok


# ---- versions, set-default, unregister ------------------------------------------------


async def test_versions_set_default_and_unregister_rules(
    jp_fetch: Fetch, build: Callable[..., str]
) -> None:
    assert (await register(jp_fetch, build("echo", "1.0")))[0] == 200
    assert (await register(jp_fetch, build("echo", "2.0", file="echo_v2")))[0] == 200
    status, both = await call(jp_fetch, "GET", "models", "echo", "all")
    assert (status, [m["modelVersion"] for m in both]) == (200, ["1.0", "2.0"])
    assert await call(jp_fetch, "DELETE", "models", "echo") == error(
        403, "InvalidModelVersionException", "Cannot remove default version for model echo"
    )
    assert await call(jp_fetch, "PUT", "models", "echo", "2.0", "set-default") == (
        200,
        {"status": 'Default version successfully updated for model "echo" to "2.0"'},
    )
    assert (await call(jp_fetch, "GET", "models", "echo"))[1][0]["modelVersion"] == "2.0"
    assert await call(jp_fetch, "DELETE", "models", "echo", "1.0") == (
        200,
        {"status": 'Model "echo" unregistered'},
    )
    assert await call(jp_fetch, "GET", "models", "echo", "1.0") == error(
        404, "ModelVersionNotFoundException", "Model version: 1.0 does not exist for model: echo"
    )
    assert await call(
        jp_fetch, "DELETE", "models", "echo", "2.0", timeout="true", synchronous="-1"
    ) == (
        200,
        {"status": 'Model "echo" unregistered'},
    )


async def test_set_default_and_unregister_errors(
    jp_fetch: Fetch, build: Callable[..., str]
) -> None:
    assert (await register(jp_fetch, build("echo")))[0] == 200
    cases: list[tuple[str, tuple[str, ...], tuple[int, dict[str, Any]]]] = [
        ("PUT", ("echo", "0.0", "set-default"), error(
            404, "ModelVersionNotFoundException",
            "Model version 0.0 does not exist for model echo")),
        ("PUT", ("nope", "1.0", "set-default"), NO_MODEL),
        ("DELETE", ("nope",), NO_MODEL),
        ("DELETE", ("echo", "0.0"), NO_VERSION),
        ("GET", ("nope",), NO_MODEL),
        ("GET", ("nope", "all"), NO_MODEL),
        ("GET", ("echo", "0.0"), NO_VERSION),
    ]  # fmt: skip
    for method, parts, expected in cases:
        assert await call(jp_fetch, method, "models", *parts) == expected, (method, parts)


async def test_wrong_verbs_are_405_json(jp_fetch: Fetch) -> None:
    not_allowed = error(
        405, "MethodNotAllowedException",
        "Requested method is not allowed, please refer to API document.",
    )  # fmt: skip
    assert await call(jp_fetch, "PUT", "models") == not_allowed
    assert await call(jp_fetch, "DELETE", "models") == not_allowed
    assert await call(jp_fetch, "POST", "models", "echo") == not_allowed
    assert await call(jp_fetch, "GET", "models", "echo", "1.0", "set-default") == not_allowed


# ---- list ------------------------------------------------------------------------------


async def test_list_pages_by_name(jp_fetch: Fetch, build: Callable[..., str]) -> None:
    urls = {name: build(name) for name in ("cc", "aa", "bb")}
    for name in urls:
        assert (await register(jp_fetch, urls[name]))[0] == 200
    every = [{"modelName": name, "modelUrl": urls[name]} for name in ("aa", "bb", "cc")]
    pages: list[tuple[dict[str, str], dict[str, Any]]] = [
        ({}, {"models": every}),
        ({"limit": "", "next_page_token": ""}, {"models": every}),
        ({"limit": "2"}, {"nextPageToken": "2", "models": every[:2]}),
        ({"limit": "1", "next_page_token": "1"}, {"nextPageToken": "2", "models": every[1:2]}),
        ({"limit": "2", "next_page_token": "2"}, {"models": every[2:]}),
        # TorchServe gives a token to a page that ends exactly at the last model too
        ({"limit": "3"}, {"nextPageToken": "3", "models": every}),
        ({"limit": "1", "next_page_token": "2"}, {"nextPageToken": "3", "models": every[2:]}),
        ({"limit": "-1"}, {"models": every}),
        ({"limit": "1", "next_page_token": "-1"}, {"nextPageToken": "1", "models": every[:1]}),
        ({"next_page_token": "12"}, {"models": []}),
    ]
    for params, expected in pages:
        assert await call(jp_fetch, "GET", "models", **params) == (200, expected), params
    assert await call(jp_fetch, "GET", "models/") == (200, {"models": every})


async def test_list_is_empty_without_models(jp_fetch: Fetch) -> None:
    response = await jp_fetch("serve", "models")
    assert response.body.decode() == '{\n  "models": []\n}\n'
    assert response.headers["Content-Type"] == "application/json"


# ---- customized describe -----------------------------------------------------------------


async def test_customized_describe_asks_the_handler(
    jp_fetch: Fetch, build: Callable[..., str]
) -> None:
    assert (await register(jp_fetch, build("echo"), initial_workers="1"))[0] == 200
    response = await jp_fetch(
        "serve", "models", "echo", params={"customized": "true"}, headers={"X-Asked-By": "me"}
    )
    [model] = json.loads(response.body)
    assert model["customizedMetadata"] == {
        "handler": "echo",
        "asked_by": "me",
        "id": response.headers["x-request-id"],
        "credentials": [],  # jp_fetch sent the token: the handler does not see it
    }
    assert set(model) >= set(DESCRIBE_KEYS)
    # TorchServe 0.12 shows any answer but a JSON object as {}, and an empty one not at all
    for shape, shown in (("text", {}), ("list", {}), ("none", {}), ("empty", None)):
        response = await jp_fetch(
            "serve", "models", "echo", "1.0", params={"customized": "TRUE"},
            headers={"X-Describe-As": shape},
        )  # fmt: skip
        assert json.loads(response.body)[0].get("customizedMetadata") == shown, shape
    [model] = (await call(jp_fetch, "GET", "models", "echo", "all", customized="true"))[1]
    assert "customizedMetadata" not in model
    [model] = (await call(jp_fetch, "GET", "models", "echo", customized="yes"))[1]
    assert "customizedMetadata" not in model


async def test_customized_describe_without_a_worker_is_503(
    jp_fetch: Fetch, build: Callable[..., str]
) -> None:
    assert (await register(jp_fetch, build("echo")))[0] == 200
    assert await call(jp_fetch, "GET", "models", "echo", customized="true") == error(
        503, "ServiceUnavailableException",
        'Model "echo" has no worker to serve describe request. '
        "Please use scale workers API to add workers.",
    )  # fmt: skip


# ---- model API control -----------------------------------------------------------------


async def test_model_api_disabled_refuses_register_and_unregister(
    jp_fetch: Fetch, build: Callable[..., str], serve_app: Any
) -> None:
    url = build("echo")
    assert (await register(jp_fetch, url))[0] == 200
    serve_app.enable_model_api = False
    not_allowed = error(
        405, "MethodNotAllowedException",
        "Requested method is not allowed, please refer to API document.",
    )  # fmt: skip
    assert await register(jp_fetch, url, model_name="other") == not_allowed
    assert await call(jp_fetch, "DELETE", "models", "echo") == not_allowed
    assert await call(jp_fetch, "DELETE", "models", "nope", "1.0") == not_allowed
    assert (await call(jp_fetch, "GET", "models"))[0] == 200
    assert (await call(jp_fetch, "GET", "models", "echo"))[0] == 200
    assert (await call(jp_fetch, "PUT", "models", "echo", min_worker="0"))[0] == 202
    assert (await call(jp_fetch, "PUT", "models", "echo", "1.0", "set-default"))[0] == 200


# ---- jupyter_serve's own: worker logs, dashboard figures -----------------------------

PRINTING = (
    "def handle(data, context):\n"
    "    if not data:\n"
    "        print('loading the printing model')\n"
    "        return None\n"
    "    return [row.get('body') for row in data]\n"
)


async def test_logs_show_worker_output_and_the_traceback_of_a_failed_register(
    jp_fetch: Fetch, build: Callable[..., str]
) -> None:
    assert (await register(jp_fetch, build("printer", source=PRINTING), initial_workers="1"))[
        0
    ] == 200
    status, logs = await call(jp_fetch, "GET", "logs", "printer")
    assert status == 200
    assert logs["modelName"] == "printer"
    assert any("loading the printing model" in line for line in logs["lines"])
    assert (await call(jp_fetch, "GET", "logs", "printer", lines="0"))[1]["lines"] == []

    failed = await register(jp_fetch, build("broken", source=BROKEN), initial_workers="1")
    assert failed[0] == 500
    status, logs = await call(jp_fetch, "GET", "logs", "broken")
    assert status == 200
    assert any("cannot load" in line for line in logs["lines"])  # the worker's traceback
    assert await call(jp_fetch, "GET", "logs", "nope") == NO_MODEL


async def test_metrics_json_gives_the_dashboards_figures(
    jp_fetch: Fetch, build: Callable[..., str]
) -> None:
    await register(jp_fetch, build("echo"), initial_workers="1")
    response = await jp_fetch(
        "serve", "predictions", "echo", method="POST", body=b"hi", raise_error=False
    )
    assert response.code == 200
    status, figures = await call(jp_fetch, "GET", "metrics", format="json")
    assert status == 200
    (model,) = [m for m in figures["models"] if m["model_name"] == "echo"]
    assert model["requests"] == 1
    assert figures["requests"]["2XX"] >= 1


async def test_a_client_error_is_logged_in_one_line_without_a_traceback(
    jp_fetch: Fetch, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("serve", "models", method="POST", body="[1, 2, 3]",
                       headers={"Content-Type": "application/json"})  # fmt: skip
    assert caught.value.code == 400
    assert "400 POST" in caplog.text
    assert "The JSON body must be an object of register parameters." in caplog.text
    assert "Traceback" not in caplog.text
    assert "Uncaught exception" not in caplog.text


async def test_a_name_too_long_for_a_folder_is_a_400_and_registers_nothing(
    jp_fetch: Fetch, build: Callable[..., str]
) -> None:
    status, body = await register(jp_fetch, build("echo"), model_name="m" * 300)
    assert (status, body["type"]) == (400, "InvalidModelException")
    assert "too long" in body["message"]
    assert (await call(jp_fetch, "GET", "models"))[1] == {"models": []}


async def test_a_url_too_long_for_the_file_system_is_a_404_not_a_500(jp_fetch: Fetch) -> None:
    for url in ("a" * 300 + ".mar", "/" + "b" * 300, "file:///" + "c" * 300):
        status, body = await register(jp_fetch, url)
        assert (status, body["type"]) == (404, "ModelNotFoundException"), url


class TestArchiveLimits:
    """`max_archive_bytes` and `max_archive_ratio` bound what a register may extract."""

    @pytest.fixture
    def jp_server_config(self, tmp_path: Path) -> dict[str, Any]:
        serve = {
            "workdir": str(tmp_path / "work"),
            "model_store": str(tmp_path / "store"),
            "fork_workers": False,
            "max_archive_bytes": 20_000,
            "max_archive_ratio": 0,
        }
        return {"ServerApp": {"jpserver_extensions": {"jupyter_serve": True}}, "ServeApp": serve}

    async def test_an_archive_expanding_past_max_archive_bytes_is_refused(
        self, jp_fetch: Fetch, build: Callable[..., str], serve_app: Any
    ) -> None:
        padding = "# " + "x" * 30_000 + "\n"  # compresses to almost nothing
        status, body = await register(jp_fetch, build("big", source=ECHO + padding))
        assert (status, body["type"]) == (400, "InvalidModelException")
        assert "20000" in body["message"] or "20,000" in body["message"]
        assert (await call(jp_fetch, "GET", "models"))[1] == {"models": []}
        assert not [p for p in Path(serve_app.workdir).rglob("*") if p.is_file()]
        assert (await register(jp_fetch, build("small")))[0] == 200


async def test_a_file_that_is_no_archive_gets_torchserves_answer_and_the_reason(
    jp_fetch: Fetch, serve_app: Any
) -> None:
    """TorchServe 0.12 answered 400 InvalidModelException "Model name is not defined." for a
    corrupt .mar (checked on a real TorchServe); the reason rides along as the cause."""
    (Path(serve_app.model_store) / "bad.mar").write_bytes(b"corrupt")
    status, body = await register(jp_fetch, "bad.mar")
    assert (status, body) == (400, {
        **error(400, "InvalidModelException", "Model name is not defined.")[1],
        "cause": "Not a model archive (zip or tar.gz): 'bad.mar'",
    })  # fmt: skip
