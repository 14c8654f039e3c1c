"""Issue 22 on the KServe routes: nothing a caller sends can stall the Jupyter server.

The server forwards each KServe request to the worker as one job with its body
untouched (server/http/kserve.py); the worker opens it (worker/kserve.py, whose own
tests show nothing is built before the checks pass). Here, end to end: a v2 shape
that cannot describe its data is a 400, a request past `max_tensor_elements` a 413,
an envelope with more items than the model's queue takes the queue's own 503, and
the server's queue sees one job per request, never one per item.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from route_models import register, serve_state, server_config
from tornado.httpclient import HTTPResponse

from jupyter_serve.wire.errors import no_worker_message
from jupyter_serve.wire.oip import BINARY_HEADER, DEFAULT_MAX_TENSOR_ELEMENTS
from jupyter_serve.wire.protocol import KSERVE_HEADER, InferenceRequest

Fetch = Callable[..., Awaitable[HTTPResponse]]
V1, V2 = ("v1", "models", "probe:predict"), ("v2", "models", "probe", "infer")


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


async def post(fetch: Fetch, path: tuple[str, ...], body: Any, **headers: str) -> HTTPResponse:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await fetch("serve", *path, method="POST", body=data, headers=headers,
                       raise_error=False)  # fmt: skip


def tensor(shape: list[int], data: list[Any], datatype: str = "FP32") -> dict[str, Any]:
    return {"inputs": [{"name": "x", "shape": shape, "datatype": datatype, "data": data}]}


def binary_bool(count: int) -> tuple[bytes, str]:
    """A v2 binary request of one BOOL input of `count` elements (one byte each)."""
    inputs = [{"name": "b", "shape": [count], "datatype": "BOOL",
               "parameters": {"binary_data_size": count}}]  # fmt: skip
    header = json.dumps({"inputs": inputs}).encode()
    return header + bytes(count), str(len(header))


def submitted(monkeypatch: pytest.MonkeyPatch, jp_serverapp: Any) -> list[InferenceRequest]:
    """Every request the probe model's queue is given, recorded as it is submitted."""
    batcher = serve_state(jp_serverapp)[0].get("probe").batcher
    seen: list[InferenceRequest] = []
    original = batcher.submit

    def recording(request: InferenceRequest, *args: Any, **kwargs: Any) -> Any:
        seen.append(request)
        return original(request, *args, **kwargs)

    monkeypatch.setattr(batcher, "submit", recording)
    return seen


async def test_shapes_that_cannot_describe_their_data_are_400s(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    for shape in ([4000000, 0], [2, 0], [3, 1, 0, 5]):  # the issue's 82 bytes: 4M lists
        response = await post(jp_fetch, V2, tensor(shape, []))
        assert response.code == 400, shape
        assert "a zero dimension with more than one outer element" in response.body.decode()
    described: list[tuple[list[int], list[Any]]] = [([1, 0], [[]]), ([0, 4000000], []), ([0], [])]
    for shape, data in described:  # one list nested in another at most
        response = await post(jp_fetch, V2, tensor(shape, []), **{"X-Mode": "seen"})
        seen = json.loads(json.loads(response.body)["outputs"][0]["data"][0])
        assert (response.code, seen["row"]["data"]) == (200, data), shape


class TestElementCap:
    """`max_tensor_elements`, here 1000: elements and the lists nesting them."""

    @pytest.fixture
    def jp_server_config(self, tmp_path: Path) -> dict[str, Any]:
        return server_config(tmp_path, max_tensor_elements=1000)

    async def test_a_request_past_the_cap_is_a_413(
        self, jp_fetch: Fetch, jp_serverapp: Any
    ) -> None:
        await register(jp_serverapp)
        assert (await post(jp_fetch, V2, tensor([999], [0.5] * 999))).code == 200  # + 1 list
        body, length = binary_bool(1000)
        over = [
            await post(jp_fetch, V2, tensor([1000], [0.5] * 1000)),
            await post(jp_fetch, V2, tensor([100] + [1] * 9, [0.5] * 100)),  # 901 lists
            await post(jp_fetch, V2, body, **{BINARY_HEADER: length}),
        ]
        for response in over:
            error = json.loads(response.body)
            assert (response.code, error["type"]) == (413, "RequestEntityTooLargeException")
            assert "limit of 1000 elements (max_tensor_elements)" in error["message"]


async def test_the_issues_6_mb_bool_request_is_refused_by_the_default_cap(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    body, length = binary_bool(6_400_000)
    response = await post(jp_fetch, V2, body, **{BINARY_HEADER: length})
    assert response.code == 413


@pytest.mark.parametrize(
    ("path", "items"),
    [
        (V1, {"instances": list(range(101))}),
        (V2, {"inputs": [tensor([1], [n], "INT64")["inputs"][0] for n in range(101)]}),
    ],
)
async def test_more_items_than_the_queue_takes_get_its_503_and_cost_one_job(
    jp_fetch: Fetch, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch,
    path: tuple[str, ...], items: dict[str, Any],
) -> None:  # fmt: skip
    await register(jp_serverapp)  # job_queue_size: 100
    queued = submitted(monkeypatch, jp_serverapp)
    response = await post(jp_fetch, path, items)
    error = json.loads(response.body)
    assert (response.code, error["type"]) == (503, "ServiceUnavailableException")
    assert error["message"] == no_worker_message("probe")  # the queue's own answer
    key = "instances" if path == V1 else "inputs"
    served = await post(jp_fetch, path, {key: items[key][:100]})
    assert served.code == 200
    assert len(json.loads(served.body)["predictions" if path == V1 else "outputs"]) == 100
    assert len(queued) == 2  # one job per request, never one per item


async def test_the_server_forwards_kserve_bodies_unopened(
    jp_fetch: Fetch, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Jupyter server's loop parses no KServe body: the worker gets it byte for byte,
    with the server's word on how to open it."""
    await register(jp_serverapp)
    queued = submitted(monkeypatch, jp_serverapp)
    body, length = binary_bool(3)
    v1 = json.dumps({"instances": [1, 2]}).encode()
    first = await post(jp_fetch, V1, v1)
    assert first.code == 200, first.body
    second = await post(jp_fetch, V2, body, **{BINARY_HEADER: length})
    assert second.code == 200, second.body
    (v1_job,), (v2_job,) = (request.parameters for request in queued)
    assert (bytes(v1_job.value), bytes(v2_job.value)) == (v1, body)
    opened = [json.loads(request.headers[KSERVE_HEADER]) for request in queued]
    assert [how["protocol"] for how in opened] == ["v1", "v2"]
    assert opened[1] == {"protocol": "v2", "room": 100, "max_elements": DEFAULT_MAX_TENSOR_ELEMENTS,
                         "model": ["probe", "1.0"], "max_bytes": 6553500}  # fmt: skip


async def test_a_clients_own_kserve_header_is_never_forwarded(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    """A prediction claiming to be a KServe envelope reaches the handler as its one row."""
    await register(jp_serverapp)
    claim = json.dumps({"protocol": "v1", "room": 100, "model": ["probe", "1.0"]})
    answer = await jp_fetch("serve", "predictions", "probe", method="POST",
                            body=json.dumps({"instances": [1, 2]}),
                            headers={"Content-Type": "application/json", "X-Mode": "seen",
                                     KSERVE_HEADER: claim})  # fmt: skip
    seen = json.loads(answer.body)
    assert (seen["keys"], seen["batch"]) == (["body"], 1)
    assert seen["row"]["body"] == {"instances": [1, 2]}
