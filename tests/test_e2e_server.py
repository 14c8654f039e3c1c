"""End to end: `jupyter serve` in a subprocess, real workers, driven over HTTP with httpx.

Written against TorchServe's documented routes and messages: the
management calls a TorchServe client makes, predictions with a raw, JSON and
multipart body, concurrent clients that share batches, a worker killed while it
holds a request, workers forked from the worker factory (`fork_workers` keeps its
default here), and a restart that brings the models back from the snapshot.
The archives hold a small echo handler (no torch), so workers start at once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from mar_builder import build_handler_mar
from serve_process import WAIT, ServeProcess, alive, still_running_after

# Echoes each row; {"ask": "batch"} reports the batch size and the worker's pid;
# {"fifo": path} writes the pid to that FIFO and then hangs (until killed).
HANDLER = """
import os
import threading


def handle(data, context):
    if not data:
        return None
    answers = []
    for row in data:
        value = row.get("data") or row.get("body")
        if isinstance(value, dict) and "fifo" in value:
            with open(value["fifo"], "w") as fifo:
                fifo.write(f"{os.getpid()}\\n")
            threading.Event().wait()
        if value == {"ask": "batch"}:
            value = {"batch": len(data), "pid": os.getpid()}
        answers.append(value)
    return answers
"""
STRICT_BATCHES = "batchSize: 4\nmaxBatchDelay: 60000\njupyter_serve:\n  batchPolicy: strict\n"


def build(store: Path, name: str, version: str = "1.0", config: str | None = None) -> str:
    """`<name>.mar` with this module's handler (and a model-config.yaml) in `store`."""
    return build_handler_mar(
        store, name, HANDLER, version=version, module="e2e_echo", config=config
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("e2e")
    store = root / "model_store"
    store.mkdir()
    build(store, "echo")
    build(store, "batcher", config=STRICT_BATCHES)
    process = ServeProcess(root)
    try:
        yield process.start()
    finally:
        process.kill()


@pytest.fixture
def client(server: ServeProcess) -> Iterator[httpx.Client]:
    with server.client() as http:
        yield http


def register(client: httpx.Client, url: str, **params: Any) -> httpx.Response:
    return client.post("models", params={"url": url, **params})


def test_register_predict_scale_describe_metrics_unregister(client: httpx.Client) -> None:
    answer = register(client, "echo.mar", initial_workers=1, synchronous="true")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "status": 'Model "echo" Version: 1.0 registered with 1 initial workers'
    }

    raw = client.post("predictions/echo", content=b"\x00\x01raw bytes\xff")
    assert (raw.status_code, raw.content) == (200, b"\x00\x01raw bytes\xff")
    assert raw.headers["x-request-id"]
    as_json = client.post("predictions/echo/1.0", json={"a": [1, 2]})
    assert (as_json.status_code, json.loads(as_json.content)) == (200, {"a": [1, 2]})
    files = {"data": ("input.bin", b"multipart bytes", "application/octet-stream")}
    multipart = client.post("predictions/echo", files=files)
    assert (multipart.status_code, multipart.content) == (200, b"multipart bytes")

    scaled = client.put("models/echo", params={"min_worker": 2, "synchronous": "true"})
    assert (scaled.status_code, scaled.json()) == (
        200,
        {"status": "Workers scaled to 2 for model: echo"},
    )
    [described] = client.get("models/echo").json()
    assert (described["modelName"], described["modelVersion"]) == ("echo", "1.0")
    assert (described["minWorkers"], described["maxWorkers"]) == (2, 2)
    workers = described["workers"]
    assert [worker["status"] for worker in workers] == ["READY", "READY"]
    assert all(worker["gpuUsage"] == "N/A" and worker["gpu"] is False for worker in workers)
    pids = [worker["pid"] for worker in workers]
    assert alive(pids) == pids

    metrics = client.get("metrics").text
    requests = [line for line in metrics.splitlines() if line.startswith("ts_inference_requests")]
    assert any('model_name="echo"' in line for line in requests), metrics
    assert re.search(r'Requests2XX\{Level="Host",Hostname="[^"]*",?\} \d+\.\d+', metrics)

    gone = client.delete("models/echo")
    assert (gone.status_code, gone.json()) == (200, {"status": 'Model "echo" unregistered'})
    assert alive(pids) == []
    missing = client.post("predictions/echo", content=b"x")
    assert (missing.status_code, missing.json()["type"]) == (404, "ModelNotFoundException")


def test_concurrent_clients_share_a_batch(server: ServeProcess, client: httpx.Client) -> None:
    answer = register(client, "batcher.mar", initial_workers=1, synchronous="true")
    assert answer.status_code == 200, answer.text

    def ask(_: int) -> dict[str, Any]:
        with server.client() as own:
            reply = own.post("predictions/batcher", json={"ask": "batch"})
            assert reply.status_code == 200, reply.text
            result: dict[str, Any] = reply.json()
            return result

    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(ask, range(4)))
    assert [item["batch"] for item in answers] == [4, 4, 4, 4]
    assert len({item["pid"] for item in answers}) == 1
    assert client.delete("models/batcher").status_code == 200


def test_worker_killed_mid_request_is_an_error_and_replaced(
    server: ServeProcess, client: httpx.Client, tmp_path: Path
) -> None:
    assert register(client, "echo.mar", initial_workers=1, synchronous="true").status_code == 200
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)
    replies: list[httpx.Response] = []

    def hang() -> None:
        with server.client() as own:
            replies.append(own.post("predictions/echo", json={"fifo": str(fifo)}))

    thread = threading.Thread(target=hang)
    thread.start()
    with open(fifo) as reader:  # opens once the handler holds the request
        pid = int(reader.readline())
    os.kill(pid, signal.SIGKILL)
    thread.join()
    [reply] = replies
    assert reply.status_code == 507  # SIGKILL from outside: as TorchServe's exit 137 (OOM)
    assert reply.json()["message"] == "Worker died."

    after = client.post("predictions/echo", json={"ask": "batch"})  # waits for the new worker
    assert after.status_code == 200, after.text
    assert after.json()["pid"] != pid
    [described] = client.get("models/echo").json()
    assert [worker["pid"] for worker in described["workers"]] == [after.json()["pid"]]
    assert client.delete("models/echo").status_code == 200


def test_registered_models_get_workers_forked_from_one_factory(
    server: ServeProcess, client: httpx.Client
) -> None:
    answer = register(client, "batcher.mar", initial_workers=1, synchronous="true")
    assert answer.status_code == 200, answer.text
    assert register(client, "echo.mar", initial_workers=2, synchronous="true").status_code == 200
    workers = [
        worker["pid"]
        for name in ("batcher", "echo")
        for worker in client.get(f"models/{name}").json()[0]["workers"]
    ]
    [factory] = server.factory_pids()
    assert {psutil.Process(pid).ppid() for pid in workers} == {factory}
    reply = client.post("predictions/echo", json={"ask": "batch"})
    assert reply.status_code == 200
    assert reply.json()["pid"] in workers
    for pid in workers:
        server.wait_for(f"Worker forked, pid {pid}")

    assert client.delete("models/echo").status_code == 200
    assert client.delete("models/batcher").status_code == 200
    assert alive(workers) == []
    assert server.factory_pids() == [factory]  # it stays for the next worker


def test_a_killed_server_leaves_neither_its_factory_nor_its_workers_running(
    tmp_path: Path,
) -> None:
    store = tmp_path / "model_store"
    store.mkdir()
    build(store, "echo")
    server = ServeProcess(tmp_path).start()
    try:
        with server.client() as client:
            answer = register(client, "echo.mar", initial_workers=2, synchronous="true")
            assert answer.status_code == 200, answer.text
        pids = server.worker_pids()
        assert len(pids) == 3  # the factory and the two workers it forked
        server.process.kill()  # no cleanup at all: they must notice on their own
        assert still_running_after(pids, WAIT) == []
    finally:
        server.kill()


def test_restart_restores_models_from_the_snapshot(tmp_path: Path) -> None:
    store = tmp_path / "model_store"
    store.mkdir()
    build(store, "echo")
    (store / "v2").mkdir()
    build(store / "v2", "echo", "2.0")
    first = ServeProcess(tmp_path).start()
    try:
        with first.client() as client:
            assert register(client, "echo.mar", initial_workers=2).status_code == 200
            put = client.put("models/echo", params={"min_worker": 2, "max_worker": 3})
            assert put.status_code == 202
            assert register(client, "v2/echo.mar", initial_workers=1).status_code == 200
            assert client.put("models/echo/2.0/set-default").status_code == 200
            described = client.get("models/echo/all").json()
            workers = [worker["pid"] for model in described for worker in model["workers"]]
            pids = first.worker_pids()
        assert set(workers) < set(pids)
        assert len(pids) == 4  # three workers and the worker factory
        assert first.stop(signal.SIGTERM) == 0
        assert alive(pids) == []
    finally:
        first.kill()

    second = ServeProcess(tmp_path).start(models=1)
    try:
        with second.client() as client:
            [first_version] = client.get("models/echo/1.0").json()
            assert (first_version["minWorkers"], first_version["maxWorkers"]) == (2, 3)
            assert len(first_version["workers"]) == 2
            assert first_version["loadedAtStartup"] is True
            [default] = client.get("models/echo").json()
            assert (default["modelVersion"], len(default["workers"])) == ("2.0", 1)
            reply = client.post("predictions/echo/1.0", content=b"back")
            assert (reply.status_code, reply.content) == (200, b"back")
    finally:
        assert second.stop() == 0
