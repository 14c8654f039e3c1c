"""The tiny Prometheus text reader, on hand-written lines and on ServeMetrics' own output."""

from __future__ import annotations

from jupyter_serve.kernel.widgets.prometheus import Sample, parse_text, sum_by
from jupyter_serve.server.metrics.serve_metrics import ServeMetrics

TEXT = r"""# HELP ts_inference_requests_total Total number of inference requests.
# TYPE ts_inference_requests_total counter
ts_inference_requests_total{model_name="mnist",model_version="1.0",hostname="h",} 3.0
ts_inference_requests_total{hostname="h",model_name="mnist",model_version="2.0"} 1 1700000000
Requests2XX{Level="Host",Hostname="h"} 4.0
odd{label="a \"quoted\" \\ value\nnext"} 2
broken{label="unterminated} 1
also broken
NaNs{x="1"} NaN
"""


def test_samples_with_labels_timestamps_escapes_and_trailing_commas() -> None:
    samples = parse_text(TEXT)
    assert samples[0] == Sample(
        "ts_inference_requests_total",
        3.0,
        {"model_name": "mnist", "model_version": "1.0", "hostname": "h"},
    )
    assert samples[1].value == 1.0  # the timestamp is not the value
    assert samples[2] == Sample("Requests2XX", 4.0, {"Level": "Host", "Hostname": "h"})
    assert samples[3].labels == {"label": 'a "quoted" \\ value\nnext'}
    assert [s.name for s in samples] == [
        "ts_inference_requests_total",
        "ts_inference_requests_total",
        "Requests2XX",
        "odd",
        "NaNs",
    ]  # malformed lines are skipped, not raised


def test_sum_by_groups_by_label_values_and_skips_nan() -> None:
    samples = parse_text(TEXT)
    by_version = sum_by(samples, "ts_inference_requests_total", ("model_name", "model_version"))
    assert by_version == {("mnist", "1.0"): 3.0, ("mnist", "2.0"): 1.0}
    assert sum_by(samples, "ts_inference_requests_total") == {(): 4.0}
    assert sum_by(samples, "NaNs") == {}


def test_reads_what_serve_metrics_renders() -> None:
    metrics = ServeMetrics("host", gpu_source=list)
    metrics.record_request("mnist", "1.0", 200, latency_us=1500.0, queue_us=100.0)
    metrics.record_request("mnist", "1.0", 503, latency_us=500.0, queue_us=100.0)
    samples = parse_text(metrics.render().decode())
    keys = ("model_name", "model_version")
    assert sum_by(samples, "ts_inference_requests_total", keys) == {("mnist", "1.0"): 2.0}
    assert sum_by(samples, "ts_inference_latency_microseconds", keys) == {("mnist", "1.0"): 2000.0}
    assert sum_by(samples, "Requests5XX") == {(): 1.0}
