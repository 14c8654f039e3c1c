"""fetch_snapshot: TorchServe's describe and metrics answers turned into a DashboardSnapshot.

Unit tests use a fake client; one test reads a real server with a real worker.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from route_models import register, server_config

from jupyter_serve.kernel.client import Response, ServeClient, ServeClientError, ServerInfo
from jupyter_serve.kernel.widgets.dashboard import ClientActions, ModelDashboard
from jupyter_serve.kernel.widgets.fetch import fetch_snapshot
from jupyter_serve.kernel.widgets.snapshot import (
    DashboardSnapshot,
    ModelView,
    Totals,
    model_view,
    parse_metrics,
)

WORKER = {
    "id": "9000",
    "startTime": "2024-01-01T00:00:00.000Z",
    "status": "READY",
    "memoryUsage": 1048576,
    "pid": 77,
    "gpu": False,
    "gpuUsage": "N/A",
}
METRICS = (
    'ts_inference_requests_total{model_name="a",model_version="1.0",hostname="h"} 4.0\n'
    'ts_inference_latency_microseconds{model_name="a",model_version="1.0",hostname="h"} 8000.0\n'
    'Requests2XX{Level="Host",Hostname="h"} 4.0\n'
)


def describe(name: str, version: str = "1.0", **extra: Any) -> dict[str, Any]:
    return {
        "modelName": name,
        "modelVersion": version,
        "minWorkers": 1,
        "maxWorkers": 1,
        "batchSize": 4,
        "workers": [WORKER],
        "jobQueueStatus": {"remainingCapacity": 99, "pendingRequests": 1},
        **extra,
    }


class FakeClient:
    """Two pages of models; `gone` was unregistered between the list and the describe."""

    def __init__(self, metrics: str = METRICS) -> None:
        self.metrics = metrics
        self.pages: list[Any] = []
        self.described: list[tuple[str, str | None]] = []

    def request_json(self, method: str, path: str, **kwargs: Any) -> Any:
        if path == "summary":  # TorchServe has no such route
            raise ServeClientError(
                404, "ResourceNotFoundException", "Requested resource is not found"
            )
        token = kwargs["params"]["next_page_token"]
        self.pages.append(token)
        if token == "0":
            return {"models": [{"modelName": "a"}, {"modelName": "gone"}], "nextPageToken": "2"}
        return {"models": [{"modelName": "b"}]}

    def describe(self, name: str, version: str | None = None, **params: Any) -> list[Any]:
        self.described.append((name, version))
        if name == "gone":
            raise ServeClientError(404, "ModelNotFoundException", "Model not found: gone")
        if name == "a":
            return [describe(name)]
        return (
            [describe(name, "2")] if version is None else [describe(name, "1"), describe(name, "2")]
        )

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None) -> Any:
        assert (method, path, params) == ("GET", "metrics", {"format": "json"})
        return Response(200, {}, self.metrics.encode())


def test_fetch_reads_every_page_and_every_version() -> None:
    client = FakeClient()
    snapshot = fetch_snapshot(client, clock=lambda: 5.0)
    assert client.pages == ["0", "2"]
    assert [m.key for m in snapshot.models] == [("a", "1.0"), ("b", "1"), ("b", "2")]
    assert [m.is_default for m in snapshot.models] == [True, False, True]
    assert client.described == [("a", "all"), ("gone", "all"), ("b", "all"), ("b", None)]
    assert snapshot.taken_at == 5.0
    assert snapshot.totals == {("a", "1.0"): Totals(4.0, 8000.0)}
    assert snapshot.responses == {"2XX": 4, "4XX": 0, "5XX": 0}
    assert set(snapshot.trends) == {("a", "1.0"), ("b", "1"), ("b", "2")}


def test_fetch_derives_trends_against_the_previous_snapshot() -> None:
    client = FakeClient()
    first = fetch_snapshot(client, clock=lambda: 1.0)
    client.metrics = METRICS.replace(" 4.0\n", " 8.0\n", 1).replace("8000.0", "28000.0")
    second = fetch_snapshot(client, first, clock=lambda: 3.0)
    trend = second.trends[("a", "1.0")]
    assert trend.throughput_rps == pytest.approx(2.0)
    assert trend.p50_ms == pytest.approx(5.0)


def test_unversioned_requests_count_for_the_default_version() -> None:
    unversioned = (
        'ts_inference_requests_total{model_name="b",model_version="default",hostname="h"} 2\n'
        'ts_inference_requests_total{model_name="b",model_version="2",hostname="h"} 3\n'
        'ts_inference_requests_total{model_name="b",model_version="1",hostname="h"} 5\n'
        'ts_inference_requests_total{model_name="old",model_version="default",hostname="h"} 1\n'
    )
    snapshot = fetch_snapshot(FakeClient(unversioned))
    requests = {key: totals.requests for key, totals in snapshot.totals.items()}
    assert requests == {("b", "2"): 5.0, ("b", "1"): 5.0, ("old", "default"): 1.0}


def test_other_describe_errors_propagate() -> None:
    class Broken(FakeClient):
        def describe(self, name: str, version: str | None = None, **params: Any) -> list[Any]:
            raise ServeClientError(500, "InternalServerException", "boom")

    with pytest.raises(ServeClientError):
        fetch_snapshot(Broken())


def test_model_view_reads_torchserve_keys_and_a_load_error() -> None:
    gpu_worker = {**WORKER, "gpu": True, "gpuUsage": "gpuId::0 utilization.gpu [%]::3 %"}
    view = model_view(describe("m", workers=[gpu_worker], loadError="ImportError: torchvision"))
    assert view.workers[0].device == "gpu"
    assert view.workers[0].pid == 77
    assert view.workers[0].memory_bytes == 1048576
    assert (view.pending, view.remaining_capacity, view.batch_size) == (1, 99, 4)
    assert view.error == "ImportError: torchvision"
    assert not view.loading  # a failure is not "loading"
    sparse = model_view({"modelName": "x", "modelVersion": None, "batchSize": "?"})
    assert sparse == ModelView("x", "default", status="Healthy", batch_size=1)


def test_health_is_derived_from_the_workers_as_torchserve_0_12_sends_no_status() -> None:
    starting = {**WORKER, "status": "UNLOADING"}
    assert model_view(describe("m")).status == "Healthy"  # 1 READY of minWorkers 1
    two = describe("m", minWorkers=2, workers=[WORKER, starting])
    assert model_view(two).status == "Partial Healthy"
    assert model_view(describe("m", workers=[starting])).status == "Unhealthy"
    assert model_view(describe("m", status="Partial Healthy")).status == "Partial Healthy"


def test_parse_metrics_prefers_the_servers_json_snapshot() -> None:
    body = {
        "hostname": "h",
        "requests": {"2XX": 3, "4XX": 1, "5XX": 0},
        "models": [
            {
                "model_name": "a",
                "model_version": "1.0",
                "requests": 4,
                "latency_ms": {"p50": 2.5, "p99": 9.0},
                "batch_fill": 0.25,
                "throughput_rps": 0.5,
            }
        ],
    }
    totals, stats, responses = parse_metrics(json.dumps(body).encode())
    assert totals == {}
    assert responses == {"2XX": 3, "4XX": 1, "5XX": 0}
    figures = stats[("a", "1.0")]
    assert (figures.p50_ms, figures.p99_ms, figures.batch_fill) == (2.5, 9.0, 0.25)
    assert parse_metrics(METRICS)[0] == {("a", "1.0"): Totals(4.0, 8000.0)}


# ---- against a real server ---------------------------------------------------


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


@pytest.fixture
def client(live_server: ServerInfo) -> ServeClient:
    return ServeClient(live_server, timeout=30)


async def test_a_real_server_with_a_real_worker(jp_serverapp: Any, client: ServeClient) -> None:
    await register(jp_serverapp, "probe", "1.0", workers=1)
    first: DashboardSnapshot = await asyncio.to_thread(fetch_snapshot, client)
    for body in ("one", "two"):
        await asyncio.to_thread(client.predict, "probe", body)
    second = await asyncio.to_thread(fetch_snapshot, client, first)
    panel = await asyncio.to_thread(client.request_json, "GET", "summary")  # what the panel shows
    (model,) = second.models
    (row,) = panel["models"]
    trend = second.trends[model.key]
    assert trend.throughput_rps == row["throughputRps"]  # the same figures, the same window
    assert (trend.batch_fill, trend.p50_ms) == (row["batchFill"], row["latencyMs"]["p50"])
    worker = model.workers[0]
    assert 0 < worker.own_memory_bytes <= worker.memory_bytes  # its own share, not RSS
    assert model.key == ("probe", "1.0")
    assert [w.status for w in model.workers] == ["READY"]
    assert model.workers[0].pid > 0
    assert not model.loading
    assert second.responses["2XX"] >= 2
    assert second.trends[model.key].throughput_rps is not None
    assert second.trends[model.key].throughput_rps > 0
    dashboard = ModelDashboard(start=False)
    dashboard.update(second)
    assert str(model.workers[0].pid) in dashboard.cards[model.key].workers.value
    answer = await asyncio.to_thread(ClientActions(client).unregister, "probe", "1.0")
    assert answer == 'Model "probe" unregistered'
    assert (await asyncio.to_thread(fetch_snapshot, client)).models == ()


def test_a_server_with_a_summary_is_read_from_it_alone() -> None:
    """jupyter_serve's `GET summary`: one request, the panel's figures and own memory."""
    summary = {
        "models": [{
            "modelName": "m", "modelVersion": "2", "isDefault": True,
            "torchserveStatus": "Healthy", "minWorkers": 1, "maxWorkers": 2, "batchSize": 8,
            "workers": [{"id": "9000", "status": "READY", "device": "cpu", "pid": 7,
                         "memoryUsage": 190 << 20, "memoryOwn": 11 << 20, "gpuUsage": None}],
            "queue": {"pending": 3, "remainingCapacity": 97}, "requests": 40,
            "throughputRps": 1.07, "latencyMs": {"p50": 2.5, "p99": 9.0}, "batchFill": 0.13,
        }],
        "totals": {"requests": {"2XX": 40, "4XX": 1, "5XX": 0}},
    }  # fmt: skip

    class Summarized:
        asked: list[str] = []

        def request_json(self, method: str, path: str, **kwargs: Any) -> Any:
            self.asked.append(path)
            return summary

        def request(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the summary carries the metrics")

        def describe(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the summary carries every version")

    client = Summarized()
    snapshot = fetch_snapshot(client, clock=lambda: 1.0)
    (model,) = snapshot.models
    assert client.asked == ["summary"]
    assert (model.key, model.is_default, model.status, model.pending) == (("m", "2"), True,
                                                                          "Healthy", 3)  # fmt: skip
    (worker,) = model.workers
    assert (worker.own_memory_bytes, worker.memory_bytes) == (11 << 20, 190 << 20)
    trend = snapshot.trends[model.key]
    assert (trend.throughput_rps, trend.batch_fill, trend.p99_ms) == (1.07, 0.13, 9.0)
    assert snapshot.responses == {"2XX": 40, "4XX": 1, "5XX": 0}
