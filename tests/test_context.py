"""The handler's `Context`: TorchServe's constructor, properties and per-request state."""

from __future__ import annotations

import pytest

from jupyter_serve.worker.context import Context, RequestProcessor
from jupyter_serve.worker.metrics import MetricsCache


def batch_context() -> Context:
    ctx = Context(
        "resnet",
        "/models/resnet",
        {"model": {"handler": "h.py"}},
        8,
        0,
        "0.12.0",
        limit_max_image_pixels=False,
        model_yaml_config={"handler": {"topk": 3}},
    )
    headers = [{"a": "1", "ts_request_sequence_id": "seq"}, {"data": {"content-type": "x/y"}}]
    return ctx.with_requests(["id-0", "id-1"], headers)


def test_positional_constructor_matches_torchserve() -> None:
    ctx = Context("m", "/d", {"model": {}}, 2, None, "1.2")
    assert ctx.model_name == "m"
    assert ctx.manifest == {"model": {}}
    assert ctx.system_properties == {
        "model_dir": "/d",
        "gpu_id": None,
        "batch_size": 2,
        "server_name": "MMS",
        "server_version": "1.2",
        "limit_max_image_pixels": True,
    }
    assert ctx.model_yaml_config == {}
    assert ctx.request_ids == {}
    assert isinstance(ctx.metrics, MetricsCache)
    assert ctx.metrics.model_name == "m"


def test_request_ids_and_headers_by_index() -> None:
    ctx = batch_context()
    assert ctx.request_ids == {0: "id-0", 1: "id-1"}
    assert (ctx.get_request_id(), ctx.get_request_id(1), ctx.get_request_id(5)) == (
        "id-0",
        "id-1",
        None,
    )
    assert ctx.get_request_header(0, "a") == "1"
    assert ctx.get_request_header(0, "missing") is None
    assert ctx.get_all_request_header(1) == {"data": {"content-type": "x/y"}}
    assert (ctx.get_sequence_id(0), ctx.get_sequence_id(1)) == ("seq", None)
    assert ctx.model_yaml_config == {"handler": {"topk": 3}}


def test_response_status_defaults_and_per_request_changes() -> None:
    ctx = batch_context()
    assert ctx.get_response_status(0) == (200, "")
    ctx.set_response_status(507, "Out", idx=1)
    assert ctx.get_response_status(0) == (200, "")
    assert ctx.get_response_status(1) == (507, "Out")
    ctx.set_all_response_status(418, "Teapot")
    assert [ctx.get_response_status(i) for i in range(2)] == [(418, "Teapot")] * 2


def test_set_response_status_defaults_to_the_first_request() -> None:
    ctx = batch_context()
    ctx.set_response_status(201)
    assert ctx.get_response_status(0) == (201, "")


def test_status_without_requests_is_ignored() -> None:
    ctx = Context("m", "/d", {}, 1, None, "")
    ctx.set_response_status(500, "x")
    ctx.set_all_response_status(500)
    assert ctx.request_processor == []


def test_content_type_and_headers_are_per_request() -> None:
    ctx = batch_context()
    ctx.set_response_content_type(0, "text/plain")
    ctx.set_response_header(0, "dummy", 1)
    assert ctx.get_response_content_type(0) == "text/plain"
    assert ctx.get_response_content_type(1) is None
    assert ctx.get_response_headers(0) == {"content-type": "text/plain", "dummy": "1"}
    assert ctx.get_response_header(0, "dummy") == "1"
    assert ctx.get_response_headers(1) == {}


def test_content_type_set_as_a_header_in_any_case_counts() -> None:
    processor = RequestProcessor({})
    processor.add_response_property("Content-Type", "image/png")
    processor.add_response_property("X-A", "b")
    assert processor.content_type() == "image/png"
    assert processor.other_headers() == {"X-A": "b"}


def test_request_processor_can_be_replaced_as_in_torchserve() -> None:
    ctx = Context("m", "/d", {}, 1, None, "")
    ctx.request_ids = {0: "r"}
    ctx.request_processor = [RequestProcessor({"k": "v"})]
    assert ctx.get_request_header(0, "k") == "v"


def test_unknown_request_index_raises() -> None:
    with pytest.raises(IndexError):
        batch_context().get_request_header(2, "a")


def test_request_headers_are_found_in_any_letter_case() -> None:
    ctx = Context("m", "/d", {"model": {}}, 1, None, "1").with_requests(
        ["id"], [{"X-Mode": "fast", "content-type": "text/plain", "x-mode": "exact"}]
    )
    assert ctx.get_request_header(0, "x-mode") == "exact"  # an exact match wins
    assert ctx.get_request_header(0, "X-MODE") == "fast"
    assert ctx.get_request_header(0, "Content-Type") == "text/plain"
    assert ctx.get_request_header(0, "x-missing") is None
