"""Issue 22 on the KServe routes: nothing a caller sends can stall the Jupyter server.

A v2 shape that cannot describe its data is a 400 and a request past
`max_tensor_elements` a 413, both before anything is built; an envelope with more
items than the model's queue takes gets the queue's own 503 before one is queued;
bodies are decoded and answers encoded in decode threads, never on the event loop,
and never more than `DECODE_THREADS` at once.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from route_models import register, serve_state, server_config
from tornado.httpclient import HTTPResponse

from jupyter_serve.batching import Batcher, no_worker_message
from jupyter_serve.errors import ServiceUnavailable
from jupyter_serve.oip import BINARY_HEADER
from jupyter_serve.protocol import InferenceRequest
from jupyter_serve.routes import kserve_codec, kserve_tensors
from jupyter_serve.routes.kserve_tensors import tensor_json
from jupyter_serve.routes.offloop import DECODE_THREADS, DECODES, DecodeSlots

Fetch = Callable[..., Awaitable[HTTPResponse]]
HANG_GUARD = 60.0  # seconds; only stops a broken test from hanging the suite
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


def spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, calls: list[str]) -> None:
    """Record the thread each call of `module.name` runs on; call through."""
    original = getattr(module, name)

    def recording(*args: Any, **kwargs: Any) -> Any:
        calls.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, recording)


async def test_shapes_that_cannot_describe_their_data_are_400s_before_anything_is_built(
    jp_fetch: Fetch, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await register(jp_serverapp)
    shaped: list[str] = []
    spy(monkeypatch, kserve_tensors, "tensor_json", shaped)
    for shape in ([4000000, 0], [2, 0], [3, 1, 0, 5]):  # the issue's 82 bytes: 4M lists
        response = await post(jp_fetch, V2, tensor(shape, []))
        assert response.code == 400, shape
        assert "a zero dimension with more than one outer element" in response.body.decode()
    assert shaped == []
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

    async def test_a_request_past_the_cap_is_a_413_before_its_data_is_decoded(
        self, jp_fetch: Fetch, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        await register(jp_serverapp)
        decoded: list[str] = []
        spy(monkeypatch, kserve_tensors, "read_elements", decoded)
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
        assert decoded == []  # the binary one was refused from its byte size


async def test_the_issues_6_mb_bool_request_is_refused_by_the_default_cap(
    jp_fetch: Fetch, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await register(jp_serverapp)
    decoded: list[str] = []
    spy(monkeypatch, kserve_tensors, "read_elements", decoded)
    body, length = binary_bool(6_400_000)
    response = await post(jp_fetch, V2, body, **{BINARY_HEADER: length})
    assert (response.code, decoded) == (413, [])


@pytest.mark.parametrize(
    ("path", "items"),
    [
        (V1, {"instances": list(range(101))}),
        (V2, {"inputs": [tensor([1], [n], "INT64")["inputs"][0] for n in range(101)]}),
    ],
)
async def test_more_items_than_the_queue_takes_get_its_503_before_any_is_queued(
    jp_fetch: Fetch, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch,
    path: tuple[str, ...], items: dict[str, Any],
) -> None:  # fmt: skip
    await register(jp_serverapp)  # job_queue_size: 100
    batcher = serve_state(jp_serverapp)[0].get("probe").batcher
    queued: list[str] = []
    spy(monkeypatch, batcher, "submit", queued)
    built: list[str] = []
    spy(monkeypatch, kserve_codec, "item_parameters", built)
    response = await post(jp_fetch, path, items)
    error = json.loads(response.body)
    assert (response.code, error["type"]) == (503, "ServiceUnavailableException")
    assert error["message"] == no_worker_message("probe")  # the queue's own answer
    assert (queued, built) == ([], [])
    key = "instances" if path == V1 else "inputs"
    served = await post(jp_fetch, path, {key: items[key][:100]})
    assert served.code == 200
    assert len(queued) == 100


async def test_items_the_queue_no_longer_takes_once_decoded_are_refused_not_queued(
    jp_fetch: Fetch, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The room read before decoding may be gone once the decode thread is done (other
    requests queued meanwhile): the loop checks it again before queueing any item."""
    await register(jp_serverapp)
    batcher = serve_state(jp_serverapp)[0].get("probe").batcher
    loop = asyncio.get_running_loop()
    decoding, gate = asyncio.Event(), threading.Event()
    original = kserve_codec.item_parameters

    def held(item: Any) -> Any:
        loop.call_soon_threadsafe(decoding.set)
        gate.wait(HANG_GUARD)
        return original(item)

    monkeypatch.setattr(kserve_codec, "item_parameters", held)
    queued: list[str] = []
    spy(monkeypatch, batcher, "submit", queued)
    answer = asyncio.ensure_future(post(jp_fetch, V1, {"instances": [1, 2]}))
    try:
        await asyncio.wait_for(decoding.wait(), HANG_GUARD)
        monkeypatch.setattr(batcher, "job_queue_size", 1)  # as if the queue had filled up
    finally:
        gate.set()
    response = await answer
    assert (response.code, json.loads(response.body)["message"]) == (
        503, no_worker_message("probe")
    )  # fmt: skip
    assert queued == []


async def test_check_room_refuses_with_the_same_503_submit_refuses_with() -> None:
    loop = asyncio.get_running_loop()
    batcher = Batcher("m", job_queue_size=2)
    batcher.submit(InferenceRequest("r1"), loop.time() + HANG_GUARD)
    batcher.check_room(1)
    with pytest.raises(ServiceUnavailable) as room:
        batcher.check_room(2)
    batcher.submit(InferenceRequest("r2"), loop.time() + HANG_GUARD)
    with pytest.raises(ServiceUnavailable) as submit:
        batcher.submit(InferenceRequest("r3"), loop.time() + HANG_GUARD)
    assert room.value.message == submit.value.message == no_worker_message("m")


async def test_bodies_are_decoded_and_answers_encoded_in_decode_threads_not_on_the_loop(
    jp_fetch: Fetch, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await register(jp_serverapp)
    calls: dict[str, list[str]] = {}
    decoders = [(kserve_codec, "item_parameters"), (kserve_codec, "input_row"),
                (kserve_tensors, "read_elements"), (kserve_codec, "output_value")]  # fmt: skip
    for module, name in decoders:
        spy(monkeypatch, module, name, calls.setdefault(name, []))
    body, length = binary_bool(3)
    answers = [
        await post(jp_fetch, V1, {"instances": [1, 2]}),
        await post(jp_fetch, V2, tensor([2, 2], [1, 2, 3, 4])),
        await post(jp_fetch, V2, body, **{BINARY_HEADER: length}),
    ]
    assert [answer.code for answer in answers] == [200, 200, 200]
    assert all(calls.values()), calls
    loop_thread = threading.current_thread().name  # the server's loop is the test's
    threads = {thread for names in calls.values() for thread in names}
    assert loop_thread not in threads
    assert all(thread.startswith("serve-decode") for thread in threads), threads
    assert DECODES.limit == DECODE_THREADS


async def test_decode_slots_run_at_most_their_limit_at_once_the_rest_wait_on_the_loop() -> None:
    slots = DecodeSlots(2)
    loop = asyncio.get_running_loop()
    gate, both_in = threading.Event(), loop.create_future()
    started: list[int] = []

    def work(n: int) -> int:
        started.append(n)
        if len(started) == 2:
            loop.call_soon_threadsafe(both_in.set_result, None)
        gate.wait(HANG_GUARD)
        return n

    tasks = [asyncio.create_task(slots.run(work, n)) for n in range(5)]
    try:
        await asyncio.wait_for(both_in, HANG_GUARD)  # every task has had its first step now
        assert (slots.running, sorted(started)) == (2, [0, 1])  # three wait for a slot
    finally:
        gate.set()
    assert await asyncio.gather(*tasks) == [0, 1, 2, 3, 4]
    assert slots.running == 0


@pytest.mark.parametrize(
    "shape",
    [[], [5], [0], [40000], [3, 20000], [20000, 1, 1], [2, 3, 4], [1, 0, 5], [8193, 2],
     [1] * 63 + [3], [3] + [1] * 63, [2] * 12],
)  # fmt: skip
def test_shaped_data_is_the_json_of_the_nested_lists_the_handler_always_got(
    shape: list[int],
) -> None:
    flat = [n % 7 / 2 if n % 3 else n for n in range(math.prod(shape))]

    def nest(values: list[Any], dims: list[int]) -> Any:
        if len(dims) <= 1:
            return values if dims else values[0]
        step = math.prod(dims[1:])
        return [nest(values[i * step : (i + 1) * step], dims[1:]) for i in range(dims[0])]

    read = lambda start, count: flat[start : start + count]  # noqa: E731
    assert tensor_json(read, shape) == json.dumps(nest(flat, shape))
