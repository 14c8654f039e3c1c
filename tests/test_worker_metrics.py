"""`context.metrics`: TorchServe's metric calls recorded as observations for the server."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_serve.worker.metrics import (
    Dimension,
    MetricsCache,
    MetricsCacheKeyError,
    MetricTypes,
)

MODEL = {"ModelName": "m", "Level": "Model"}


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
    cache.add_percent("Util", 10.0, None, {"Device": "cpu"})
    cache.add_metric("Distance", 7, "km", 1, [Dimension("Road", "A1")], MetricTypes.GAUGE)
    assert cache.drain() == [
        record("Inference", 2.5, "Seconds", {"Stage": "x", **MODEL}, "gauge", "a,b"),
        record("Image", 4.0, "Gigabytes", MODEL, "gauge", "a"),
        record("Util", 10.0, "Percent", {"Device": "cpu", **MODEL}, "gauge", "a,b"),
        record("Distance", 7.0, "km", {"Road": "A1"}, "gauge", "b"),
    ]


def test_caller_dimensions_replace_the_defaults(cache: MetricsCache) -> None:
    cache.add_counter("C", 1, dimensions={"ModelName": "other", "Level": "Host"})
    assert cache.drain()[0]["dimensions"] == {"ModelName": "other", "Level": "Host"}


def test_add_error_uses_the_error_level(cache: MetricsCache) -> None:
    cache.add_error("Failures", 1)
    assert cache.drain() == [
        record("Failures", 1.0, "Count", {"ModelName": "m", "Level": "Error"}, "counter", "a,b")
    ]


@pytest.mark.parametrize(("method", "unit"), [("add_time", "h"), ("add_size", "TB")])
def test_unsupported_units_are_refused(cache: MetricsCache, method: str, unit: str) -> None:
    with pytest.raises(ValueError, match="must be one of"):
        getattr(cache, method)("X", 1, None, unit)


def test_cached_metric_records_with_its_dimension_names(cache: MetricsCache) -> None:
    metric = cache.add_metric_to_cache("Req", "count", ["Route", "Code"], "counter")
    metric.add_or_update(1, ["predict", 200], request_id="a")
    metric.update(2, "b", [Dimension("Route", "explain"), Dimension("Code", "500")])
    assert cache.drain() == [
        record("Req", 1.0, "Count", {"Route": "predict", "Code": "200"}, "counter", "a"),
        record("Req", 2.0, "Count", {"Route": "explain", "Code": "500"}, "counter", "b"),
    ]


def test_cached_metric_refuses_the_wrong_number_of_values(cache: MetricsCache) -> None:
    metric = cache.add_metric_to_cache("Req", dimension_names=["Route"])
    with pytest.raises(ValueError, match="has dimensions \\['Route'\\], got 2 values"):
        metric.add_or_update(1, ["a", "b"])


def test_get_metric_finds_by_name_and_type(cache: MetricsCache) -> None:
    gauge = cache.add_metric_to_cache("Q", "ms", [], MetricTypes.GAUGE)
    assert cache.get_metric("Q", MetricTypes.GAUGE) is gauge
    assert cache.get_metric("Q", "gauge") is gauge
    with pytest.raises(MetricsCacheKeyError):
        cache.get_metric("Q", MetricTypes.COUNTER)


def test_metrics_defined_once_record_into_each_new_batch() -> None:
    metrics = MetricsCache("m")
    metric = metrics.add_metric_to_cache("Init", "ms", [], "histogram")
    metric.add_or_update(1)  # at load time: dropped by the first batch
    metrics.begin_batch({0: "x"})
    metric.add_or_update(2)
    assert [r["value"] for r in metrics.drain()] == [2.0]
    assert metrics.drain() == []


def test_unknown_metric_type_is_refused(cache: MetricsCache) -> None:
    with pytest.raises(ValueError, match="Unknown metric type"):
        cache.add_metric("X", 1, metric_type="summary")


def test_dimensions_must_have_name_and_value(cache: MetricsCache) -> None:
    with pytest.raises(TypeError, match=r"needs \.name and \.value"):
        cache.add_metric("X", 1, dimensions=["plain"])


def test_dimension_prints_as_torchserve() -> None:
    dim = Dimension("Level", "Model")
    assert (str(dim), dim.to_dict()) == ("Level:Model", {"Name": "Level", "Value": "Model"})
