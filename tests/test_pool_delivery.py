"""`pool.delivery`: results handed to their waiting clients with their queue times."""

from __future__ import annotations

import dataclasses

from jupyter_serve.server.pool.delivery import with_queue_ms
from jupyter_serve.wire.protocol import InferenceResult


def test_a_result_gets_its_queue_time_and_keeps_every_other_field() -> None:
    result = InferenceResult("id-1", 507, b"body", "text/plain", "Busy", {"dummy": "1"})
    timed = with_queue_ms(result, 12.5)
    assert timed == dataclasses.replace(result, queue_ms=12.5)
    assert {f.name for f in dataclasses.fields(InferenceResult)} == {
        "request_id",
        "status",
        "body",
        "content_type",
        "reason",
        "headers",
        "queue_ms",
    }  # a new field must be carried over by with_queue_ms too
