"""Tests for server/metrics/exposition.py: the Java simpleclient text format TorchServe emits."""

from __future__ import annotations

import math
import re

import pytest
from prometheus_client.metrics_core import Metric

from jupyter_serve.server.metrics.exposition import java_double, write_families


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1, "1.0"),
        (62.78, "62.78"),
        (0.0, "0.0"),
        (0.001, "0.001"),
        (1234567.0, "1234567.0"),
        (1e7, "1.0E7"),
        (12345678.0, "1.2345678E7"),
        (1.5e-5, "1.5E-5"),
        (-2.5e10, "-2.5E10"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
    ],
)
def test_values_are_written_as_java_doubles(value: float, text: str) -> None:
    assert java_double(value) == text


def test_labels_keep_their_order_and_end_with_a_comma() -> None:
    family = Metric(
        "Requests2XX", "Torchserve prometheus counter metric with unit: Count", "counter"
    )
    family.name = "Requests2XX"
    family.add_sample("Requests2XX", {"Level": "Host", "Hostname": 'h"1'}, 3)
    text = write_families([family]).decode()
    assert text.splitlines() == [
        "# HELP Requests2XX Torchserve prometheus counter metric with unit: Count",
        "# TYPE Requests2XX counter",
        'Requests2XX{Level="Host",Hostname="h\\"1",} 3.0',
    ]
    assert re.search(r'Requests2XX{Level="Host",Hostname=".*",} \d+\.\d+', text)


def test_a_family_without_samples_still_has_help_and_type() -> None:
    text = write_families([Metric("Requests5XX", "help", "gauge")]).decode()
    assert text == "# HELP Requests5XX help\n# TYPE Requests5XX gauge\n"
