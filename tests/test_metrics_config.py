"""Tests for jupyter_serve.server.metrics.config: TorchServe's metrics YAML, read and checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_serve.server.metrics.config import DEFAULT, MetricDecl, load_metrics_config
from jupyter_serve.wire.errors import BadRequest

EXAMPLE = Path(__file__).with_name("data") / "torchserve_custom_metrics" / "metrics.yaml"


def test_torchserve_example_file_reads_with_its_anchors() -> None:
    config = load_metrics_config(EXAMPLE)
    assert config.model_metrics[0] == MetricDecl("InferenceRequestCount", "counter", "count", ())
    assert MetricDecl("PostprocessCallCount", "counter", "CallCount", ("ModelName", "Level")) in (
        config.model_metrics
    )
    assert MetricDecl("RequestBatchSize", "gauge", "count", ("ModelName",)) in config.model_metrics
    assert len(config.model_metrics) == 8


def test_the_default_is_torchservess_own_file() -> None:
    """The example's ts_metrics section is TorchServe's default file's, entry for entry."""
    assert load_metrics_config(EXAMPLE).ts_metrics == DEFAULT.ts_metrics
    assert [d.name for d in DEFAULT.model_metrics] == ["HandlerTime", "PredictionTime"]


def test_worker_declarations_are_plain_data() -> None:
    assert DEFAULT.worker_declarations()[0] == {
        "name": "HandlerTime", "unit": "ms", "dimensions": ["ModelName", "Level"], "type": "gauge"
    }  # fmt: skip


def test_sections_are_optional(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("model_metrics:\n  histogram:\n    - {name: Lat, unit: ms, dimensions: []}\n")
    config = load_metrics_config(path)
    assert (config.ts_metrics, config.model_metrics) == (
        (),
        (MetricDecl("Lat", "histogram", "ms"),),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model_metrics:\n  summary: []\n", "invalid metric type 'summary'"),
        ("model_metrics:\n  counter:\n    - {unit: ms, dimensions: []}\n", "name cannot be empty"),
        ("model_metrics:\n  counter:\n    - {name: X, dimensions: []}\n", "unit cannot be empty"),
        ("model_metrics:\n  counter:\n    - {name: X, unit: ms}\n", "dimensions must be a list"),
        ("ts_metrics: [1]\n", "must map metric types"),
        ("- a\n", "expected a mapping"),
        ("a: &a [*a]\n", "nest"),
    ],
)
def test_mistakes_name_the_file_and_entry(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(BadRequest, match=message) as raised:
        load_metrics_config(path)
    assert str(path) in raised.value.message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="no such file"):
        load_metrics_config(tmp_path / "absent.yaml")
