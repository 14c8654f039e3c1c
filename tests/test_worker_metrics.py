"""`context.metrics`: TorchServe 0.12's metrics cache, its defaults, errors and emissions."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from jupyter_serve.worker.metrics import (
    Dimension,
    MetricsCache,
    MetricsCacheKeyError,
    MetricsCacheTypeError,
    MetricsCacheValueError,
    MetricTypes,
)

MODEL = {"ModelName": "m", "Level": "Model"}
COUNTER, GAUGE, HISTOGRAM = MetricTypes.COUNTER, MetricTypes.GAUGE, MetricTypes.HISTOGRAM


@pytest.fixture
def cache() -> MetricsCache:
    metrics = MetricsCache("m")
    metrics.begin_batch({0: "a", 1: "b"})
    return metrics


def record(name: str, value: float, unit: str, dims: dict[str, str], kind: str, rid: Any) -> Any:
    return {
        "name": name,
        "value": value,
        "unit": unit,
        "dimensions": dims,
        "type": kind,
        "request_id": rid,
    }


def test_add_counter_records_an_increment_with_default_dimensions(cache: MetricsCache) -> None:
    cache.add_counter("Loops", 1, idx=0)
    cache.add_counter("Loops", 2, 1)
    assert cache.drain() == [
        record("Loops", 1.0, "Count", MODEL, "counter", "a"),
        record("Loops", 2.0, "Count", MODEL, "counter", "b"),
    ]


def test_no_index_means_every_request_of_the_batch(cache: MetricsCache) -> None:
    cache.add_time("T", 3)
    assert cache.drain()[0]["request_id"] == "a,b"


def test_positional_arguments_follow_torchserve_order(cache: MetricsCache) -> None:
    cache.add_time("Inference", 2.5, None, "s", [Dimension("Stage", "x")])
    cache.add_size("Image", 4, 0, "GB")
    cache.add_percent("Util", 10.0, None, [Dimension("Device", "cpu")], HISTOGRAM)
    cache.add_metric("Distance", 7, "km", 1, [Dimension("Road", "A1")], GAUGE)
    assert cache.drain() == [
        record("Inference", 2.5, "Seconds", {"Stage": "x", **MODEL}, "gauge", "a,b"),
        record("Image", 4.0, "Gigabytes", MODEL, "gauge", "a"),
        record("Util", 10.0, "Percent", {"Device": "cpu", **MODEL}, "histogram", "a,b"),
        record("Distance", 7.0, "km", {"Road": "A1", **MODEL}, "gauge", "b"),
    ]


def test_caller_dimensions_replace_the_defaults(cache: MetricsCache) -> None:
    cache.add_counter("C", 1, dimensions=[Dimension("Level", "Host"), Dimension("ModelName", "o")])
    assert cache.drain()[0]["dimensions"] == {"Level": "Host", "ModelName": "o"}


def test_add_error_has_only_the_error_level(cache: MetricsCache) -> None:
    cache.add_error("Failures", 1)
    assert cache.drain() == [record("Failures", 1.0, "unit", {"Level": "Error"}, "counter", None)]


def test_metrics_emitted_at_load_are_the_models() -> None:
    """TorchServe gives the cache a request id at load: `initialize`'s metrics get the
    model's default dimensions, and stay until drained (the load's R frame carries them)."""
    metrics = MetricsCache("m")
    metrics.add_metric("InitializeCallCount", 1, "count")
    drained = metrics.drain()
    assert [(r["name"], r["dimensions"]) for r in drained] == [("InitializeCallCount", MODEL)]
    assert drained[0]["request_id"]


def test_a_declared_metric_is_found_and_keeps_its_dimensions(cache: MetricsCache) -> None:
    cache.declare([
        {"name": "PreprocessCallCount", "unit": "count", "dimensions": ["ModelName"],
         "type": "counter"},
        {"name": "RequestBatchSize", "unit": "count", "dimensions": ["ModelName"],
         "type": "gauge"},
    ])  # fmt: skip
    cache.get_metric("PreprocessCallCount", COUNTER).add_or_update(1, ["m"])
    cache.get_metric("RequestBatchSize", GAUGE).add_or_update(2, dimension_values=["m"])
    assert cache.drain() == [
        record("PreprocessCallCount", 1.0, "Count", {"ModelName": "m"}, "counter", None),
        record("RequestBatchSize", 2.0, "Count", {"ModelName": "m"}, "gauge", None),
    ]


def test_an_add_call_never_redefines_a_cached_metric(
    cache: MetricsCache, caplog: pytest.LogCaptureFixture
) -> None:
    """TorchServe takes the cached metric of that name and type: the defaults make two
    values for its one dimension name, so the emission is logged and dropped."""
    cache.add_metric_to_cache("Calls", "count", ["ModelName"], COUNTER)
    with caplog.at_level(logging.ERROR, "ts.metrics"):
        cache.add_counter("Calls", 1)
    assert cache.drain() == []
    assert "Failed to update metric with name:Calls" in caplog.text
    assert cache.get_metric("Calls").dimension_names == ["ModelName"]


def test_a_negative_counter_increment_is_logged_and_dropped(
    cache: MetricsCache, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, "ts.metrics"):
        cache.add_counter("Calls", -1)
        cache.add_time("Lag", -1)  # a gauge may go down
    assert [r["name"] for r in cache.drain()] == ["Lag"]
    assert "Counter metric update value cannot be negative" in caplog.text


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda c: c.add_time("X", 1, None, "h"), MetricsCacheValueError, "one of ['ms', 's']"),
        (lambda c: c.add_size("X", 1, None, "TB"), ValueError, "one of ['MB','kB', 'GB', 'B']"),
        (lambda c: c.get_metric("Q", "gauge"), MetricsCacheTypeError, "MetricTypes enum"),
        (lambda c: c.add_metric("X", 1, "ms", metric_type="gauge"), MetricsCacheTypeError,
         "MetricTypes enum"),
        (lambda c: c.add_metric_to_cache("X", "ms", ("a",)), MetricsCacheTypeError,
         "`dimension_names` should be a list"),
        (lambda c: c.add_metric_to_cache(1, "ms"), MetricsCacheTypeError, "`metric_name` must"),
        (lambda c: c.get_metric("Q", GAUGE), MetricsCacheKeyError,
         "Metric of type 'MetricTypes.GAUGE' and name 'Q' doesn't exist"),
        (lambda c: c.add_metric("X", 1, "ms", dimensions=["plain"]), MetricsCacheTypeError,
         r"needs \.name and \.value"),
    ],
)  # fmt: skip
def test_torchserve_errors(cache: MetricsCache, call: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message.replace("[", r"\[").replace("(", r"\(")):
        call(cache)


def test_cached_metric_records_with_its_dimension_names(cache: MetricsCache) -> None:
    metric = cache.add_metric_to_cache("Req", "count", ["Route", "Code"], COUNTER)
    metric.add_or_update(1, ["predict", 200], request_id="a")
    metric.update(2, "b", [Dimension("Route", "explain")])  # TorchServe: names replaced
    assert cache.drain() == [
        record("Req", 1.0, "Count", {"Route": "predict", "Code": "200"}, "counter", "a"),
        record("Req", 2.0, "Count", {"Route": "explain"}, "counter", "b"),
    ]


def test_get_metric_finds_by_name_and_type(cache: MetricsCache) -> None:
    gauge = cache.add_metric_to_cache("Q", "ms", [], GAUGE)
    assert cache.get_metric("Q", GAUGE) is gauge
    with pytest.raises(MetricsCacheKeyError):
        cache.get_metric("Q", COUNTER)


def test_a_new_batch_drops_what_was_not_sent() -> None:
    metrics = MetricsCache("m")
    metric = metrics.add_metric_to_cache("Init", "ms", [], HISTOGRAM)
    metric.add_or_update(1)
    metrics.begin_batch({0: "x"})
    metric.add_or_update(2)
    assert [r["value"] for r in metrics.drain()] == [2.0]
    assert metrics.drain() == []


def test_dimension_prints_as_torchserve() -> None:
    dim = Dimension("Level", "Model")
    assert (str(dim), dim.to_dict()) == ("Level:Model", {"Name": "Level", "Value": "Model"})
