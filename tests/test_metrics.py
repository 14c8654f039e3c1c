"""Tests for server/metrics/serve_metrics.py: TorchServe's Prometheus series, filter, snapshot."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import prometheus_client
import pytest

from jupyter_serve.server.batching import Batcher
from jupyter_serve.server.devices import GpuStats
from jupyter_serve.server.metrics.config import MetricsConfig, load_metrics_config
from jupyter_serve.server.metrics.serve_metrics import ServeMetrics
from jupyter_serve.server.models import ModelSpec
from jupyter_serve.server.pool import WorkerPool
from jupyter_serve.wire.protocol import InferenceRequest

FAKE_WORKER = [sys.executable, str(Path(__file__).with_name("fake_worker.py"))]
HANG_GUARD = 30.0  # seconds; only stops a broken pool from hanging the suite


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def no_gpus() -> list[GpuStats]:
    return []


def make_metrics(**kwargs: Any) -> ServeMetrics:
    kwargs.setdefault("gpu_source", no_gpus)
    kwargs.setdefault("host_source", dict)  # no host readings: renders stay comparable
    return ServeMetrics("host1", **kwargs)


def make_spec(batch_size: int = 4, name: str = "mnist") -> ModelSpec:
    return ModelSpec(
        model_name=name,
        version="1.0",
        model_dir="/nowhere",
        handler="handler:handle",
        manifest={},
        batch_size=batch_size,
    )


def observation(name: str, value: float, kind: str, **dims: str) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "unit": "Milliseconds",
        "dimensions": dims,
        "type": kind,
        "request_id": "r1",
    }


def lines(metrics: ServeMetrics, names: list[str] | None = None) -> list[str]:
    return metrics.render(names).decode().splitlines()


def test_requests_fill_torchserve_counters_per_model_version() -> None:
    metrics = make_metrics()
    metrics.record_request("mnist", "1.0", 200, 1500.0, 250.0)
    metrics.record_request("mnist", "1.0", 200, 500.0, 50.0)
    metrics.record_request("mnist", None, 503, 100.0, 0.0)
    text = lines(metrics)
    labels = 'model_name="mnist",model_version="1.0",hostname="host1",'
    assert f"ts_inference_requests_total{{{labels}}} 2.0" in text
    assert f"ts_inference_latency_microseconds{{{labels}}} 2000.0" in text
    assert f"ts_queue_latency_microseconds{{{labels}}} 300.0" in text
    default = 'model_name="mnist",model_version="default",hostname="host1",'
    assert f"ts_inference_requests_total{{{default}}} 1.0" in text
    assert "# TYPE ts_inference_requests_total counter" in text


def test_status_classes_count_into_requests_nxx() -> None:
    metrics = make_metrics()
    for status in (200, 201, 404, 400, 413, 500, 302):
        metrics.record_request("m", "1.0", status, 10.0, 1.0)
    text = lines(metrics)
    assert 'Requests2XX{Level="Host",Hostname="host1",} 2.0' in text
    assert 'Requests4XX{Level="Host",Hostname="host1",} 3.0' in text
    assert 'Requests5XX{Level="Host",Hostname="host1",} 1.0' in text
    assert "# TYPE Requests2XX counter" in text  # TorchServe's name, no _total
    assert "# HELP Requests2XX Torchserve prometheus counter metric with unit: Count" in text


def test_worker_thread_time_is_the_time_after_the_queue() -> None:
    metrics = make_metrics()
    metrics.record_request("m", "1.0", 200, 4000.0, 1000.0)
    assert 'WorkerThreadTime{Level="Host",Hostname="host1",} 3.0' in lines(metrics)


def test_record_batch_sets_queue_time_and_the_workers_metrics() -> None:
    metrics = make_metrics()
    handler_time = observation("HandlerTime", 7.5, "gauge", ModelName="mnist", Level="Model")
    prediction = observation("PredictionTime", 12.0, "gauge", ModelName="mnist", Level="Model")
    metrics.record_batch(make_spec(), [handler_time, prediction], 12.5, 3, 4.5)
    text = lines(metrics)
    assert 'QueueTime{Level="Host",Hostname="host1",} 4.5' in text
    assert 'PredictionTime{ModelName="mnist",Level="Model",Hostname="host1",} 12.0' in text
    assert 'HandlerTime{ModelName="mnist",Level="Model",Hostname="host1",} 7.5' in text


def test_worker_load_time_is_labelled_by_worker() -> None:
    metrics = make_metrics()
    metrics.record_worker_load("W-mnist-1", 812.0)
    expected = 'WorkerLoadTime{WorkerName="W-mnist-1",Level="Host",Hostname="host1",} 812.0'
    assert expected in lines(metrics)


def test_handler_counter_increments_and_gauge_is_set() -> None:
    metrics = make_metrics()
    spec = make_spec()
    counter = observation("CacheHits", 2, "counter", Shard="a")
    gauge = observation("QueueDepth", 5, "gauge")
    metrics.record_batch(spec, [counter, counter, gauge], 1.0, 1, 0.0)
    metrics.record_batch(spec, [{**gauge, "value": 3}], 1.0, 1, 0.0)
    text = lines(metrics)
    assert 'CacheHits{Shard="a",Hostname="host1",} 4.0' in text  # auto-detected: its own dims
    assert 'QueueDepth{Hostname="host1",} 3.0' in text  # no dimensions: only Hostname
    assert "# HELP CacheHits Torchserve prometheus counter metric with unit: Milliseconds" in text


def test_handler_histogram_observes_into_buckets() -> None:
    metrics = make_metrics()
    spec = make_spec()
    metrics.record_batch(spec, [observation("Size", 3, "histogram", Level="Model")], 1.0, 1, 0.0)
    metrics.record_batch(spec, [observation("Size", 70, "histogram", Level="Model")], 1.0, 1, 0.0)
    text = lines(metrics)
    labels = 'Level="Model",Hostname="host1",'
    assert f'Size_bucket{{{labels}le="2.5",}} 0.0' in text  # the Java client's buckets
    assert f'Size_bucket{{{labels}le="5.0",}} 1.0' in text
    assert f'Size_bucket{{{labels}le="10.0",}} 1.0' in text
    assert f'Size_bucket{{{labels}le="+Inf",}} 2.0' in text
    assert f"Size_count{{{labels}}} 2.0" in text
    assert f"Size_sum{{{labels}}} 73.0" in text
    assert "# TYPE Size histogram" in text


def test_handler_metric_names_and_labels_are_made_prometheus_safe() -> None:
    metrics = make_metrics()
    metrics.record_handler_metric(observation("my-metric", 1, "gauge", **{"a b": "x"}), "m")
    assert 'my_metric{a_b="x",Hostname="host1",} 1.0' in lines(metrics)


@pytest.mark.parametrize(
    "bad",
    [
        {"value": 1, "type": "gauge"},
        {"name": "X", "value": "many", "type": "gauge"},
        {"name": "X", "value": 1, "type": "summary"},
        {"name": "X", "value": 1, "type": "gauge", "dimensions": ["a"]},
        {"name": "9lives", "value": 1, "type": "gauge"},
    ],
)
def test_malformed_handler_metrics_are_ignored(bad: dict[str, Any]) -> None:
    metrics = make_metrics()
    before = metrics.render()
    metrics.record_handler_metric(bad, "m")
    assert metrics.render() == before


def test_handler_metric_updates_by_name_and_position_or_is_ignored() -> None:
    """As TorchServe's frontend: the metric of that name takes the values by position;
    a different number of values, or a name of the server's own metrics, is dropped."""
    metrics = make_metrics()
    metrics.record_handler_metric(observation("Hits", 1, "counter", Shard="a"), "m")
    metrics.record_handler_metric(observation("Hits", 5, "counter", Other="b"), "m")
    metrics.record_handler_metric(observation("Hits", 5, "counter", Shard="a", More="x"), "m")
    metrics.record_handler_metric(observation("Requests2XX", 1, "gauge"), "m")
    metrics.record_handler_metric(observation("Size", 1, "histogram"), "m")
    metrics.record_handler_metric(observation("Size_sum", 7, "gauge"), "m")
    text = "\n".join(lines(metrics))
    assert 'Hits{Shard="a",Hostname="host1",} 1.0' in text
    assert 'Hits{Shard="b",Hostname="host1",} 5.0' in text
    assert "More" not in text
    assert "Requests2XX{" not in text
    assert "Size_sum gauge" not in text
    assert 'Size_sum{Hostname="host1",} 1.0' in text


def test_render_filter_selects_named_families() -> None:
    metrics = make_metrics()
    metrics.record_request("m", "1.0", 200, 10.0, 1.0)
    metrics.record_handler_metric(observation("Size", 3, "histogram"), "m")
    text = "\n".join(lines(metrics, ["Requests2XX", "Size", "ts_inference_requests_total"]))
    assert 'Requests2XX{Level="Host",Hostname="host1",} 1.0' in text
    assert "Size_sum{" in text
    assert "Size_bucket{" in text
    assert "ts_inference_requests_total{" in text
    assert "ts_inference_latency_microseconds" not in text
    assert "WorkerThreadTime" not in text
    assert metrics.render(["NoSuchMetric"]) == b""


def test_gpu_gauges_come_from_the_gpu_source() -> None:
    gpu: GpuStats = {
        "id": 0,
        "utilization": 37,
        "memory_utilization": 12,
        "memory_used_mib": 1930,
        "memory_total_mib": 16000,
        "memory_used_percent": 12.06,
    }
    metrics = ServeMetrics("host1", gpu_source=lambda: [gpu])
    text = lines(metrics)
    labels = 'Level="Host",DeviceId="0",Hostname="host1",'  # TorchServe's metrics.yaml order
    assert f"GPUUtilization{{{labels}}} 37.0" in text
    assert f"GPUMemoryUtilization{{{labels}}} 12.06" in text
    assert f"GPUMemoryUsed{{{labels}}} 1930.0" in text
    assert metrics.snapshot()["gpus"] == [gpu]


def test_without_gpu_there_are_no_gpu_samples() -> None:
    text = "\n".join(lines(ServeMetrics("host1")))  # real NVML: absent here
    assert "GPUUtilization{" not in text
    assert "# TYPE GPUUtilization gauge" in text


def test_registries_are_private() -> None:
    first, second = make_metrics(), make_metrics()
    first.record_request("m", "1.0", 200, 10.0, 1.0)
    assert b"Requests2XX{" not in second.render()
    assert b"Requests2XX" not in prometheus_client.generate_latest(prometheus_client.REGISTRY)
    assert first.registry is not prometheus_client.REGISTRY


def test_snapshot_counts_statuses_and_latency_percentiles() -> None:
    metrics = make_metrics()
    for latency_ms in range(1, 101):
        metrics.record_request("m", "1.0", 200, latency_ms * 1000.0, 0.0)
    metrics.record_request("m", "1.0", 500, 1000.0, 0.0)
    snap = metrics.snapshot()
    assert snap["hostname"] == "host1"
    assert snap["requests"] == {"2XX": 100, "4XX": 0, "5XX": 1}
    (model,) = snap["models"]
    assert (model["model_name"], model["model_version"]) == ("m", "1.0")
    assert model["requests"] == 101
    assert model["statuses"] == {"200": 100, "500": 1}
    assert model["latency_ms"] == {"p50": 50.0, "p99": 99.0}


def test_snapshot_latency_window_slides() -> None:
    metrics = make_metrics(window=3)
    for latency_ms in (100, 200, 1, 2, 3):
        metrics.record_request("m", "1.0", 200, latency_ms * 1000.0, 0.0)
    (model,) = metrics.snapshot()["models"]
    assert model["latency_ms"] == {"p50": 2.0, "p99": 3.0}
    assert model["requests"] == 5


def test_snapshot_without_requests_has_no_percentiles() -> None:
    metrics = make_metrics()
    metrics.record_batch(make_spec(), [], 1.0, 1, 0.0)
    (model,) = metrics.snapshot()["models"]
    assert model["latency_ms"] == {"p50": None, "p99": None}
    assert model["throughput_rps"] == 0.0


def test_snapshot_batch_fill_is_mean_batch_over_batch_size() -> None:
    metrics = make_metrics()
    spec = make_spec(batch_size=4)
    for batch_len in (4, 2, 3):
        metrics.record_batch(spec, [], 1.0, batch_len, 0.0)
    (model,) = metrics.snapshot()["models"]
    assert model["batches"] == 3
    assert model["mean_batch_size"] == 3.0
    assert model["batch_size"] == 4
    assert model["batch_fill"] == 0.75


def test_snapshot_throughput_counts_the_last_seconds() -> None:
    clock = FakeClock(1000.0)
    metrics = make_metrics(clock=clock, throughput_seconds=10.0)
    for _ in range(20):
        metrics.record_request("m", "1.0", 200, 1.0, 0.0)
    clock.now = 1005.5
    for _ in range(10):
        metrics.record_request("m", "1.0", 200, 1.0, 0.0)
    assert metrics.snapshot()["models"][0]["throughput_rps"] == 3.0
    clock.now = 1012.0  # the first 20 fall out of the window
    assert metrics.snapshot()["models"][0]["throughput_rps"] == 1.0
    clock.now = 1030.0
    assert metrics.snapshot()["models"][0]["throughput_rps"] == 0.0


def test_forget_model_drops_dashboard_stats_but_keeps_series() -> None:
    metrics = make_metrics()
    metrics.record_request("m", "1.0", 200, 10.0, 1.0)
    metrics.forget_model("m", "1.0")
    assert metrics.snapshot()["models"] == []
    labels = {"model_name": "m", "model_version": "1.0", "hostname": "host1"}
    assert metrics.value("ts_inference_requests_total", labels) == 1.0


def test_pool_on_metrics_feeds_record_batch(tmp_path: Path) -> None:
    metrics = make_metrics()
    spec = make_spec(batch_size=2).with_changes(model_dir=str(tmp_path), max_batch_delay=0.0)

    async def main() -> None:
        pool = WorkerPool(
            spec,
            Batcher.for_spec(spec),
            command=FAKE_WORKER,
            backoff=(0,),
            gpu_count=lambda: 0,
            on_metrics=metrics.record_batch,
        )
        await pool.scale(1)
        deadline = asyncio.get_running_loop().time() + 60.0
        requests = [InferenceRequest(request_id=rid, headers={}) for rid in ("a", "b")]
        await asyncio.gather(*(pool.batcher.submit(req, deadline) for req in requests))
        await pool.stop()

    asyncio.run(asyncio.wait_for(main(), HANG_GUARD))
    text = lines(metrics)
    assert 'FakeBatchSize{ModelName="mnist",Hostname="host1",} 2.0' in text
    (model,) = metrics.snapshot()["models"]
    assert (model["batches"], model["batch_fill"]) == (1, 1.0)


def test_unversioned_requests_count_for_the_served_version_on_the_dashboard() -> None:
    metrics = ServeMetrics(hostname="h", gpu_source=list)
    metrics.record_request("m", None, 200, 1500.0, 0.0, served_version="2.0")
    metrics.record_request("m", "2.0", 200, 2500.0, 0.0)
    (model,) = metrics.snapshot()["models"]
    assert (model["model_version"], model["requests"]) == ("2.0", 2)
    # TorchServe's Prometheus label for an unversioned request stays "default".
    assert b'model_version="default"' in metrics.render(["ts_inference_requests_total"])


# ---- metrics_config -------------------------------------------------------------------


def config_of(text: str, tmp_path: Path) -> MetricsConfig:
    path = tmp_path / "metrics.yaml"
    path.write_text(text)
    return load_metrics_config(path)


def test_ts_metrics_say_which_server_metrics_exist_and_their_labels(tmp_path: Path) -> None:
    """A server metric left out is never recorded; the file's label names and unit are used,
    the values by position (TorchServe's `MetricCache` builds them from the file)."""
    config = config_of(
        "ts_metrics:\n  counter:\n"
        "    - {name: Requests2XX, unit: Calls, dimensions: [Lvl, Host]}\n", tmp_path
    )  # fmt: skip
    metrics = make_metrics(config=config)
    metrics.record_request("m", "1.0", 200, 10.0, 1.0)
    text = lines(metrics)
    assert text == [
        "# HELP Requests2XX Torchserve prometheus counter metric with unit: Calls",
        "# TYPE Requests2XX counter",
        'Requests2XX{Lvl="Host",Host="host1",} 1.0',
    ]


def test_declared_model_metrics_are_listed_before_any_sample(tmp_path: Path) -> None:
    config = config_of(
        "model_metrics:\n  counter:\n    - {name: Calls, unit: count, dimensions: []}\n"
        "  gauge:\n    - {name: Batch, unit: count, dimensions: [ModelName]}\n", tmp_path
    )  # fmt: skip
    metrics = make_metrics(config=config)
    assert lines(metrics) == [
        "# HELP Calls Torchserve prometheus counter metric with unit: count",
        "# TYPE Calls counter",
        "# HELP Batch Torchserve prometheus gauge metric with unit: count",
        "# TYPE Batch gauge",
    ]
    metrics.record_handler_metric(observation("Calls", 2, "counter"))
    metrics.record_handler_metric(observation("Batch", 3, "gauge", ModelName="m"))
    metrics.record_handler_metric(observation("Batch", 4, "gauge", ModelName="m", Level="X"))
    assert 'Calls{Hostname="host1",} 2.0' in lines(metrics)  # declared without dimensions
    assert 'Batch{ModelName="m",Hostname="host1",} 3.0' in lines(metrics)


def test_without_auto_detect_an_undeclared_handler_metric_is_dropped() -> None:
    metrics = make_metrics(auto_detect=False)
    metrics.record_handler_metric(observation("Surprise", 1, "counter"))
    metrics.record_handler_metric(observation("HandlerTime", 2.5, "gauge", A="m", B="Model"))
    text = "\n".join(lines(metrics))
    assert "Surprise" not in text
    assert 'HandlerTime{ModelName="m",Level="Model",Hostname="host1",} 2.5' in text


def test_a_models_own_metrics_config_is_declared_with_its_batches() -> None:
    metrics = make_metrics(auto_detect=False)
    declared = {"name": "Tokens", "unit": "count", "dimensions": ["ModelName"], "type": "counter"}
    spec = make_spec().with_changes(model_metrics=(declared,))
    metrics.record_batch(spec, [observation("Tokens", 5, "counter", ModelName="mnist")], 1, 1, 0)
    assert 'Tokens{ModelName="mnist",Hostname="host1",} 5.0' in lines(metrics)


def test_host_gauges_are_read_at_scrape_time() -> None:
    readings = {"CPUUtilization": 12.5, "MemoryUsed": 800.0}
    metrics = make_metrics(host_source=lambda: readings)
    text = lines(metrics)
    assert 'CPUUtilization{Level="Host",Hostname="host1",} 12.5' in text
    assert 'MemoryUsed{Level="Host",Hostname="host1",} 800.0' in text
    assert "# HELP DiskUsage Torchserve prometheus gauge metric with unit: Gigabytes" in text
    readings["CPUUtilization"] = 50.0
    assert 'CPUUtilization{Level="Host",Hostname="host1",} 50.0' in lines(metrics)


def test_real_host_readings_have_torchserves_names() -> None:
    from jupyter_serve.server.metrics.host import HOST_GAUGES, host_readings

    readings = host_readings()  # psutil is installed with the test extras (ipykernel)
    assert sorted(readings) == sorted(HOST_GAUGES)
    assert 0 <= readings["MemoryUtilization"] <= 100
