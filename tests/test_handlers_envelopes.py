"""TorchServe's request envelopes: rows in the orchestrator's shape, outputs back in it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jupyter_serve.handlers.envelopes import (
    ENVELOPES,
    BodyEnvelope,
    JSONEnvelope,
    KServeEnvelope,
    KServev2Envelope,
)


class FakeContext:
    """The context members envelopes read (TorchServe's MockContext offers the same)."""

    def __init__(self, headers: list[dict[str, str]] | None = None,
                 manifest: dict[str, Any] | None = None) -> None:  # fmt: skip
        self.headers = headers or [{}]
        self.manifest = manifest or {}
        self.model_name = "tiny"

    def get_request_header(self, idx: int, key: str) -> str | None:
        return self.headers[idx].get(key)

    def get_request_id(self, idx: int = 0) -> str:
        return f"request-{idx}"


def argmax_rows(data: Any, context: Any) -> list[int] | None:
    """A handler whose answer per item is the index of its largest value."""
    if not data:
        return None
    return [max(range(len(row)), key=row.__getitem__) for row in data]


def test_json_instances_of_one_row() -> None:
    rows = [{"body": {"instances": [[1.0, 2.0]]}}]
    assert JSONEnvelope(argmax_rows).handle(rows, FakeContext()) == ['{"predictions": [1]}']


def test_json_instances_of_several_rows_are_one_batch_split_back_per_row() -> None:
    seen: list[Any] = []

    def spy(data: Any, context: Any) -> Any:
        seen.append(list(data))
        return argmax_rows(data, context)

    rows = [
        {"body": {"instances": [[1.0, 2.0]]}},
        {"body": json.dumps({"instances": [[4.0, 3.0], [5.0, 6.0]]}).encode()},
    ]
    answers = JSONEnvelope(spy).handle(rows, FakeContext())
    assert answers == ['{"predictions": [1]}', '{"predictions": [0, 1]}']
    assert seen == [[[1.0, 2.0], [4.0, 3.0], [5.0, 6.0]]]  # the handler saw one batch


def test_json_b64_instances_and_fields_arrive_as_bytes() -> None:
    rows = [{"instances": [{"b64": "YQ=="}, {"image": {"b64": "Yg=="}, "k": 1}]}]
    envelope = JSONEnvelope(lambda data, context: [repr(item) for item in data])
    answer = json.loads(envelope.handle(rows, FakeContext())[0])
    assert answer == {"predictions": ["b'a'", "{'image': b'b', 'k': 1}"]}


def test_body_passes_each_rows_content_and_the_outputs_as_they_are() -> None:
    rows = [{"body": [1.0, 2.0]}, {"data": [3.0, 0.0]}]
    assert BodyEnvelope(argmax_rows).handle(rows, FakeContext()) == [1, 0]


def test_a_load_call_with_no_data_reaches_the_handler_untouched() -> None:
    calls: list[Any] = []
    for envelope in ENVELOPES.values():
        assert envelope(lambda data, context: calls.append(data)).handle(None, None) is None
    assert calls == [None] * len(ENVELOPES)


@pytest.mark.parametrize(("explain", "key"), [("False", "predictions"), ("True", "explanations")])
def test_kserve_v1_takes_instances_and_answers_predictions_or_explanations(
    explain: str, key: str
) -> None:
    context = FakeContext(headers=[{"explain": explain}])
    body = json.dumps({"instances": [[1.0, 2.0], [4.0, 3.0]]}).encode()
    answer = KServeEnvelope(argmax_rows).handle([{"body": body}], context)
    assert answer == [{key: [1, 0]}]


def test_kserve_v2_answers_named_shaped_typed_flat_tensors() -> None:
    context = FakeContext(manifest={"model": {"modelName": "mnist", "modelVersion": "1.0"}})
    request = {
        "id": "req-7",
        "inputs": [{"name": "input-0", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}],
    }
    envelope = KServev2Envelope(lambda data, ctx: [[[1, 2], [3, 4]]])
    answer = envelope.handle([{"body": request}], context)
    assert answer == [
        {
            "id": "req-7",
            "model_name": "mnist",
            "model_version": "1.0",
            "outputs": [{"name": "input-0", "shape": [2, 2], "datatype": "INT64",
                         "data": [1, 2, 3, 4]}],
        }
    ]  # fmt: skip


def test_kserve_v2_gives_the_handler_the_inputs_and_types_floats_and_text() -> None:
    seen: list[Any] = []

    def handler(data: Any, context: Any) -> list[Any]:
        seen.append(data)
        return [[0.5, 1], ["a", "b"]]

    inputs = [{"name": "x", "shape": [1], "datatype": "INT64", "data": [1]}]
    answer = KServev2Envelope(handler).handle([{"body": {"inputs": inputs}}], FakeContext())
    assert seen == [inputs]
    outputs = answer[0]["outputs"]
    assert [(o["name"], o["datatype"]) for o in outputs] == [("x", "FP64"), ("output-1", "BYTES")]
