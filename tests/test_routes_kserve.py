"""Tests for the KServe v1 / v2 (Open Inference Protocol) routes through jp_fetch."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from route_models import STREAM, register, serve_state, server_config
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_serve.server.http.base import NOT_FOUND_MESSAGE
from jupyter_serve.wire.oip import flatten, typed_data

Fetch = Callable[..., Awaitable[HTTPResponse]]
JSON = "application/json"


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


async def post_json(fetch: Fetch, *path: str, data: Any, mode: str = "") -> Any:
    headers = {"Content-Type": JSON, "X-Mode": mode}
    response = await fetch("serve", *path, method="POST", body=json.dumps(data), headers=headers)
    assert response.code == 200
    return json.loads(response.body)


async def test_v1_instances_are_batch_rows_and_come_back_as_predictions(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    instances = [{"data": [1, 2]}, {"data": "text"}, 7]
    body = await post_json(jp_fetch, "v1", "models", "probe:predict", data={"instances": instances})
    assert body == {"predictions": [[1, 2], "text", 7]}
    seen = await post_json(
        jp_fetch, "v1", "models", "probe:explain", data={"instances": [{"data": 1}]}, mode="seen"
    )
    [row] = seen["explanations"]
    assert row["explain"] == "True"
    assert row["row"] == {"data": 1}


async def test_a_streaming_handler_answers_kserve_with_its_final_results(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp, name="echo_stream", source=STREAM)
    body = await post_json(jp_fetch, "v1", "models", "echo_stream:predict", data={"instances": [1]})
    assert body == {"predictions": ["hello world "]}  # intermediate chunks fit no envelope


async def test_v1_malformed_envelope_and_unknown_model(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    with pytest.raises(HTTPClientError) as bad:
        await post_json(jp_fetch, "v1", "models", "probe:predict", data={"instances": 1})
    assert bad.value.code == 400
    with pytest.raises(HTTPClientError) as missing:
        await post_json(jp_fetch, "v1", "models", "nobody:predict", data={"instances": []})
    assert missing.value.code == 404


async def test_a_body_without_envelope_is_served_as_torchserve_without_service_envelope(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    for path in ("v1/models/probe:predict", "v2/models/probe/infer"):
        echoed = await jp_fetch(
            "serve", *path.split("/"), method="POST", body=b"raw bytes",
            headers={"Content-Type": "application/octet-stream"},
        )  # fmt: skip
        assert (echoed.code, echoed.body) == (200, b"raw bytes"), path
    seen = await post_json(jp_fetch, "v1", "models", "probe:explain", data={"a": 1}, mode="seen")
    assert (seen["row"], seen["explain"]) == ({"body": {"a": 1}}, "True")
    seen = await post_json(jp_fetch, "v2", "models", "probe", "infer", data=[1], mode="seen")
    assert (seen["row"], seen["explain"]) == ({"body": [1]}, "False")


@pytest.mark.parametrize("path", ["v1/models/probe:predict", "v2/models/probe/infer"])
async def test_past_client_timeout_an_enveloped_request_gets_no_answer(
    jp_fetch: Fetch, jp_serverapp: Any, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    await register(jp_serverapp, model_config="clientTimeoutInMills: 100\n")
    body = (
        {"instances": [1, 2]}
        if path.startswith("v1")
        else {"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [1]}]}
    )
    with pytest.raises(HTTPClientError) as caught:  # the handler sleeps 0.5 s
        await jp_fetch("serve", *path.split("/"), method="POST", body=json.dumps(body),
                       headers={"X-Mode": "sleep"}, request_timeout=2)  # fmt: skip
    assert caught.value.code == 599  # the client's own timeout: the server sent nothing
    assert "due to client timeout" in caplog.text
    answered = await post_json(jp_fetch, *path.split("/"), data=body)  # the server serves on
    assert answered


async def test_v1_model_ready(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    await register(jp_serverapp, name="idle", workers=0)
    ready = await jp_fetch("serve", "v1", "models", "probe")
    assert json.loads(ready.body) == {"name": "probe", "ready": True}
    idle = await jp_fetch("serve", "v1", "models", "idle")
    assert json.loads(idle.body) == {"name": "idle", "ready": False}


BROKEN = """
def handle(data, context):
    if data is None:
        raise RuntimeError("this model never loads")
    return data
"""


async def test_v1_ready_counts_workers_at_all_as_torchserve_v2_only_serving_ones(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp, name="broken", workers=0, source=BROKEN)
    registry, _ = serve_state(jp_serverapp)
    await registry.scale("broken", None, 1, 1, False)  # a worker slot, failing to load
    v1 = await jp_fetch("serve", "v1", "models", "broken")
    assert json.loads(v1.body) == {"name": "broken", "ready": True}  # TorchServe: has workers
    v2 = await jp_fetch("serve", "v2", "models", "broken", "ready")
    assert json.loads(v2.body) == {"name": "broken", "ready": False}


async def test_v2_infer_reshapes_inputs_and_flattens_outputs(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    request = {
        "id": "req-1",
        "inputs": [
            {"name": "input-0", "shape": [2, 2], "datatype": "INT64", "data": [1, 2, 3, 4]},
            {"name": "input-1", "shape": [1], "datatype": "BYTES", "data": ["hello"]},
            {"name": "input-2", "shape": [2], "datatype": "FP32", "data": [0.5, 1]},
        ],
    }
    body = await post_json(jp_fetch, "v2", "models", "probe", "infer", data=request)
    assert body == {
        "id": "req-1",
        "model_name": "probe",
        "model_version": "1.0",
        "outputs": [
            {"name": "input-0", "shape": [4], "datatype": "INT64", "data": [1, 2, 3, 4]},
            {"name": "input-1", "shape": [1], "datatype": "BYTES", "data": ["hello"]},
            {"name": "input-2", "shape": [2], "datatype": "FP64", "data": [0.5, 1]},
        ],
    }


async def test_v2_handler_sees_the_input_reshaped(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    tensor = {"name": "x", "shape": [2, 2], "datatype": "INT64", "data": [1, 2, 3, 4]}
    response = await jp_fetch(
        "serve", "v1", "models", "probe:predict", method="POST",
        body=json.dumps({"instances": [tensor]}), headers={"Content-Type": JSON, "X-Mode": "seen"},
    )  # fmt: skip
    assert json.loads(response.body)["predictions"][0]["row"]["data"] == [1, 2, 3, 4]
    body = await post_json(jp_fetch, "v2", "models", "probe", "infer",
                           data={"inputs": [tensor]}, mode="seen")  # fmt: skip
    uuid.UUID(body["id"])  # no "id" in the request: the request id answers
    [output] = body["outputs"]
    assert output["name"] == "x"
    assert output["datatype"] == "BYTES"  # the probe's dict, as one JSON element
    seen = json.loads(output["data"][0])
    assert seen["row"]["data"] == [[1, 2], [3, 4]]
    assert seen["keys"] == ["data", "datatype", "name", "shape"]


async def test_v2_shape_mismatch_is_400(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    tensor = {"name": "x", "shape": [3], "datatype": "INT64", "data": [1, 2]}
    with pytest.raises(HTTPClientError) as caught:
        await post_json(jp_fetch, "v2", "models", "probe", "infer", data={"inputs": [tensor]})
    assert caught.value.code == 400


SHAPE_3 = {"inputs": [{"name": "x", "shape": [3], "datatype": "INT64", "data": [1, 2]}]}


@pytest.mark.parametrize(
    ("method", "path", "body", "mode", "status", "error"),
    [
        ("POST", "v2/models/nobody/infer", SHAPE_3, "", 404, "Model not found: nobody"),
        ("GET", "v2/models/nobody", None, "", 404, "Model not found: nobody"),
        ("GET", "v2/models/nobody/ready", None, "", 404, "Model not found: nobody"),
        ("GET", "v2/models/probe/config", None, "", 404, NOT_FOUND_MESSAGE),  # no such route
        ("POST", "v2/repository/index", {}, "", 404, NOT_FOUND_MESSAGE),
        ("POST", "v2/models/probe/infer", SHAPE_3, "", 400,
         "Input x: 2 values do not fit shape [3]."),  # the worker's answer
        ("POST", "v2/models/probe/infer", {"inputs": [{**SHAPE_3["inputs"][0], "shape": [2]}]},
         "raise", 503, "Prediction failed: RuntimeError: boom"),  # the whole batch failed
        ("POST", "v1/models/nobody:predict", {"instances": [1]}, "", 404,
         "Model not found: nobody"),
        ("POST", "v1/models/probe:predict", {"instances": 1}, "", 400,
         'The "instances" of the request body must be a list.'),
    ],
)  # fmt: skip
async def test_kserve_errors_carry_the_error_key_kserve_and_triton_clients_read(
    jp_fetch: Fetch, jp_serverapp: Any, method: str, path: str, body: Any, mode: str,
    status: int, error: str,
) -> None:  # fmt: skip
    await register(jp_serverapp)
    response = await jp_fetch("serve", *path.split("/"), method=method, raise_error=False,
                              body=None if body is None else json.dumps(body),
                              headers={"X-Mode": mode})  # fmt: skip
    answer = json.loads(response.body)
    assert (response.code, answer["error"], answer["code"]) == (status, error, status)
    assert answer["message"] == error.split(": RuntimeError")[0]  # TorchServe's, as it was


@pytest.mark.parametrize(
    ("path", "body"),
    [("v1/models/probe:predict", {"instances": []}), ("v2/models/probe/infer", {"inputs": []})],
)
async def test_an_envelope_without_items_is_a_400(
    jp_fetch: Fetch, jp_serverapp: Any, path: str, body: Any
) -> None:
    await register(jp_serverapp)
    response = await jp_fetch("serve", *path.split("/"), method="POST", body=json.dumps(body),
                              raise_error=False)  # fmt: skip
    assert response.code == 400
    assert "has no" in json.loads(response.body)["error"]


async def test_a_handlers_own_error_answer_is_sent_as_it_is(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    tensor = {"name": "x", "shape": [1], "datatype": "INT64", "data": [1]}
    response = await jp_fetch("serve", "v2", "models", "probe", "infer", method="POST",
                              body=json.dumps({"inputs": [tensor]}), raise_error=False,
                              headers={"X-Mode": "status"})  # fmt: skip
    assert (response.code, response.body) == (507, b"Invalid response")


async def test_v2_server_routes(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    live = await jp_fetch("serve", "v2", "health", "live")
    assert json.loads(live.body) == {"live": True}
    ready = await jp_fetch("serve", "v2", "health", "ready")
    assert json.loads(ready.body) == {"ready": True}
    meta = json.loads((await jp_fetch("serve", "v2")).body)
    assert meta == {"name": "Torchserve", "version": "0.12.0", "extenstion": ["kserve", "kubeflow"]}
    model = json.loads((await jp_fetch("serve", "v2", "models", "probe")).body)
    assert model["name"] == "probe"
    assert model["versions"] == ["1.0"]
    model_ready = json.loads((await jp_fetch("serve", "v2", "models", "probe", "ready")).body)
    assert model_ready == {"name": "probe", "ready": True}


async def test_v2_versioned_infer_serves_that_version_other_versioned_paths_are_501(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    """KServe and Triton serve `versions/{v}/infer` (tritonclient's model_version); TorchServe
    0.12 answers 501 there, and jupyter_serve still does on the other versioned paths."""
    await register(jp_serverapp, version="2.0")
    await register(jp_serverapp, version="3.0")
    inputs = {"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [5]}]}
    answer = await post_json(jp_fetch, "v2", "models", "probe", "versions", "3.0", "infer",
                             data=inputs)  # fmt: skip
    assert (answer["model_version"], answer["outputs"][0]["data"]) == ("3.0", [5])
    with pytest.raises(HTTPClientError) as unknown:
        await post_json(jp_fetch, "v2", "models", "probe", "versions", "9.9", "infer", data=inputs)
    assert unknown.value.code == 404
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("serve", "v2", "models", "probe", "versions", "2.0", "ready")
    assert caught.value.code == 501
    assert caught.value.response is not None
    assert json.loads(caught.value.response.body) == {
        "error": "Model versioning is not yet supported."
    }


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", ("v1", "models", "m:predict")),
        ("GET", ("v1", "models", "m")),
        ("POST", ("v2", "models", "m", "infer")),
        ("GET", ("v2", "models", "m")),
        ("GET", ("v2", "health", "live")),
        ("GET", ("v2",)),
        ("POST", ("v2", "models", "m", "versions", "1", "infer")),
    ],
)
async def test_kserve_routes_refuse_requests_without_credentials(
    jp_fetch: Fetch, method: str, path: tuple[str, ...]
) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("serve", *path, method=method, body=b"{}" if method == "POST" else None,
                       headers={"Authorization": ""})  # fmt: skip
    assert caught.value.code == 403


DOUBLING = """
def handle(data, context):
    if data is None:
        return None
    return [value * 2 for value in data]
"""


class TestServiceEnvelope:
    """`service_envelope=kserve`: the worker's envelope reads the body on every route."""

    @pytest.fixture
    def jp_server_config(self, tmp_path: Path) -> dict[str, Any]:
        return server_config(tmp_path, service_envelope="kserve")

    async def test_kserve_and_predictions_routes_answer_through_the_workers_envelope(
        self, jp_fetch: Fetch, jp_serverapp: Any
    ) -> None:
        await register(jp_serverapp, name="doubling", source=DOUBLING)
        body = {"instances": [1, 2]}
        for path in ("v1/models/doubling:predict", "predictions/doubling"):
            answer = await post_json(jp_fetch, *path.split("/"), data=body)
            assert answer == {"predictions": [2, 4]}, path
        explained = await post_json(jp_fetch, "v1", "models", "doubling:explain", data=body)
        assert explained == {"explanations": [2, 4]}


NESTED = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (("v1", "models", "probe:predict"), b'{"instances": ' + NESTED + b"}", "nests too deeply"),
        (("v2", "models", "probe", "infer"), b'{"inputs": ' + NESTED + b"}", "nests too deeply"),
        (("v2", "models", "probe", "infer"),
         b'{"inputs": [{"name": "x", "shape": ["a"], "datatype": "FP32", "data": [1]}]}',
         "shape must be"),
        (("v2", "models", "probe", "infer"),
         b'{"inputs": [{"name": "x", "shape": [0], "datatype": "BYTES", "data": []}]}',
         "without data"),
        (("v2", "models", "probe", "infer"),
         b'{"inputs": [{"name": "x", "shape": ["' + b"9" * 5000 + b'"], "datatype": "FP32", '
         b'"data": [1]}]}', "shape must be"),  # int() refuses 5000 digits
        (("v2", "models", "probe", "infer"),
         b'{"inputs": [{"name": "x", "shape": [], "datatype": "FP32", "data": []}]}',
         "0 values do not fit shape []"),  # a scalar without its one value
        (("v2", "models", "probe", "infer"),
         b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP99", "data": [1, 2]}]}',
         "unknown datatype 'FP99'"),  # refused in the binary form too
        (("v2", "models", "probe", "infer"),
         b'{"inputs": [{"name": "x", "shape": [2], "datatype": "BOOL", "data": [1, 2]}]}',
         "BOOL data must be true or false, not 1"),
        (("v2", "models", "probe", "infer"),
         b'{"inputs": [{"name": "x", "shape": [2], "datatype": "INT32", "data": [1.5, 2.5]}]}',
         "INT32 data must be integers from -2147483648 to 2147483647, not 1.5"),
        (("v2", "models", "probe", "infer"),
         b'{"inputs": [{"name": "x", "shape": [2], "datatype": "UINT8", "data": [1, 256]}]}',
         "not 256"),
        (("v2", "models", "probe", "infer"),
         b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [true]}]}',
         "FP32 data must be numbers, not true"),
        (("v2", "models", "probe", "infer"),
         b'{"inputs": [{"name": "x", "shape": [2], "datatype": "BYTES", "data": ["a", 7]}]}',
         "BYTES data must be strings, not 7"),
        (("models",), b'{"url": ' + NESTED + b"}", "nests too deeply"),
    ],
)  # fmt: skip
async def test_hostile_json_is_a_400_never_a_500(
    jp_fetch: Fetch, jp_serverapp: Any, path: tuple[str, ...], body: bytes, message: str
) -> None:
    await register(jp_serverapp)
    response = await jp_fetch("serve", *path, method="POST", body=body,
                              headers={"Content-Type": JSON}, raise_error=False)  # fmt: skip
    assert response.code == 400
    assert message in json.loads(response.body)["message"]


def test_flatten_takes_any_nesting_without_recursion() -> None:
    deep: Any = 7
    for _ in range(100_000):
        deep = [deep]
    assert flatten([deep, (1, [2, 3])]) == [7, 1, 2, 3]


async def test_deep_but_parsable_v2_data_is_flattened_without_recursion(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    data = "[" * 900 + "1" + "]" * 900
    tensor = {"name": "x", "shape": [1], "datatype": "INT64", "data": "DATA"}
    body = json.dumps({"inputs": [tensor]}).replace('"DATA"', data)
    response = await jp_fetch("serve", "v2", "models", "probe", "infer", method="POST",
                              body=body, headers={"Content-Type": JSON})  # fmt: skip
    assert json.loads(response.body)["outputs"][0]["data"] == [1]


async def test_v2_outputs_that_are_not_numbers_are_bytes_tensors_of_json(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    tensor = {"name": "x", "shape": [1], "datatype": "INT64", "data": [5]}
    body = await post_json(jp_fetch, "v2", "models", "probe", "infer", data={"inputs": [tensor]},
                           mode="seen")  # fmt: skip
    [output] = body["outputs"]
    assert output["datatype"] == "BYTES"
    assert all(isinstance(item, str) for item in output["data"])
    assert json.loads(output["data"][0])["batch"] == 1  # the handler's dict, as JSON text


def test_typed_data_follows_the_open_inference_protocol() -> None:
    assert typed_data([1, 2]) == ("INT64", [1, 2])
    assert typed_data([1.5, 2]) == ("FP64", [1.5, 2])
    assert typed_data([True, False]) == ("BOOL", [True, False])
    assert typed_data(["a", {"b": 1}, None, 3]) == ("BYTES", ["a", '{"b": 1}', "null", "3"])
