"""The Open Inference Protocol's binary tensor extension on the v2 routes, with the real
`tritonclient.http` (binary inputs and outputs by default) against a real server and worker."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as triton
from route_models import register, server_config
from tornado.httpclient import HTTPResponse
from tritonclient.utils import InferenceServerException

from jupyter_serve.server.http.base import NOT_FOUND_MESSAGE

Fetch = Callable[..., Awaitable[HTTPResponse]]
HANG_GUARD = 60.0  # seconds; only stops a broken route from hanging the suite
DOUBLER = """
def _double(value):
    if isinstance(value, list):
        return [_double(item) for item in value]
    if isinstance(value, bool):
        return not value
    return value * 2


def handle(data, context):
    if not data:
        return None
    out = []
    for row in data:
        value = row["data"]
        if isinstance(value, (bytes, bytearray)):
            out.append(type(value).__name__ + ":" + bytes(value).decode().upper())
        elif isinstance(value, str):
            out.append("str:" + value.upper())
        else:
            out.append(_double(value))
    return out
"""


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


@pytest.fixture
def client_args(
    jp_serverapp: Any, jp_fetch: Fetch, jp_http_port: int, jp_base_url: str
) -> dict[str, Any]:
    """tritonclient's url (host:port/path) and the Jupyter token header (`jp_fetch` is asked
    for because it is what starts the server accepting on `jp_http_port`)."""
    url = f"127.0.0.1:{jp_http_port}{jp_base_url}serve"
    token = jp_serverapp.identity_provider.token
    return {"url": url, "headers": {"Authorization": f"token {token}"}}


def infer(client_args: dict[str, Any], inputs: list[Any], **options: Any) -> Any:
    """One inference with a fresh client (tritonclient is synchronous: run it in a thread)."""
    client = triton.InferenceServerClient(url=client_args["url"], network_timeout=HANG_GUARD)
    try:
        headers = dict(client_args["headers"])  # tritonclient writes its own headers into it
        return client.infer("doubler", inputs, headers=headers, **options)
    finally:
        client.close()


def tensor(name: str, array: np.ndarray, datatype: str, binary: bool = True) -> Any:
    return triton.InferInput(name, list(array.shape), datatype).set_data_from_numpy(
        array, binary_data=binary
    )


async def test_tritonclient_defaults_send_and_get_binary_tensors(
    jp_serverapp: Any, client_args: dict[str, Any]
) -> None:
    await register(jp_serverapp, name="doubler", source=DOUBLER)
    inputs = [
        tensor("f", np.array([[1.5, 2.0], [3.0, -4.25]], dtype=np.float32), "FP32"),
        tensor("i", np.array([7, 8, 9], dtype=np.int64), "INT64"),
        tensor("b", np.array([True, False]), "BOOL"),
        tensor("s", np.array([b"hello"], dtype=np.object_), "BYTES"),
    ]
    result = await asyncio.to_thread(infer, client_args, inputs)
    response = result.get_response()
    assert all("binary_data_size" in out["parameters"] for out in response["outputs"])
    assert result.as_numpy("f").tolist() == [3.0, 4.0, 6.0, -8.5]  # FP64, flattened
    assert result.as_numpy("i").tolist() == [14, 16, 18]
    assert result.as_numpy("b").tolist() == [False, True]
    assert result.as_numpy("s").tolist() == [b"bytearray:HELLO"]  # raw bytes reach the handler


async def test_json_inputs_and_a_mix_of_json_and_binary_outputs(
    jp_serverapp: Any, client_args: dict[str, Any]
) -> None:
    await register(jp_serverapp, name="doubler", source=DOUBLER)
    inputs = [
        tensor("i", np.array([1, 2], dtype=np.int32), "INT32", binary=False),
        tensor("s", np.array([b"word"], dtype=np.object_), "BYTES", binary=False),
    ]
    outputs = [triton.InferRequestedOutput("i", binary_data=True),
               triton.InferRequestedOutput("s", binary_data=False)]  # fmt: skip
    result = await asyncio.to_thread(infer, client_args, inputs, outputs=outputs)
    by_name = {out["name"]: out for out in result.get_response()["outputs"]}
    assert "data" not in by_name["i"]
    assert by_name["s"]["data"] == ["str:WORD"]
    assert result.as_numpy("i").tolist() == [2, 4]
    assert result.as_numpy("s").tolist() == ["str:WORD"]  # JSON BYTES stay text


async def test_only_the_requested_outputs_come_back_and_an_unknown_one_is_a_400(
    jp_serverapp: Any, client_args: dict[str, Any]
) -> None:
    await register(jp_serverapp, name="doubler", source=DOUBLER)
    inputs = [tensor("a", np.array([1], dtype=np.int64), "INT64"),
              tensor("b", np.array([2, 3], dtype=np.int64), "INT64")]  # fmt: skip
    for binary in (True, False):
        wanted = [triton.InferRequestedOutput("b", binary_data=binary)]
        result = await asyncio.to_thread(infer, client_args, inputs, outputs=wanted)
        [output] = result.get_response()["outputs"]
        assert (output["name"], "data" not in output) == ("b", binary)
        assert result.as_numpy("b").tolist() == [4, 6]
    unknown = [triton.InferRequestedOutput("zzz")]
    with pytest.raises(InferenceServerException) as caught:
        await asyncio.to_thread(infer, client_args, inputs, outputs=unknown)
    assert caught.value.status() == "400"
    assert caught.value.message().startswith("Unexpected inference output 'zzz'")


async def test_malformed_binary_requests_are_400s_with_torchserve_errors(
    jp_fetch: Fetch, jp_serverapp: Any, client_args: dict[str, Any]
) -> None:
    await register(jp_serverapp, name="doubler", source=DOUBLER)
    header = json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 8}}]}).encode()  # fmt: skip
    cases = [
        (header + b"1234", str(len(header))),  # data cut short
        (header + b"12345678", "abc"),  # not a length
        (header + b"12345678", str(len(header) + 100)),  # past the body
        (b"{not json" + b"12345678", "9"),
        (header[:-1] + b"12345678", str(len(header) - 1)),  # the JSON cut short
    ]
    for body, length in cases:
        response = await jp_fetch(
            "serve", "v2", "models", "doubler", "infer", method="POST", body=body,
            headers={"Inference-Header-Content-Length": length}, raise_error=False,
        )  # fmt: skip
        assert response.code == 400, (body, length)
        error = json.loads(response.body)
        assert (error["code"], error["type"]) == (400, "BadRequestException")
    bad = tensor("f", np.array([1.0], dtype=np.float32), "FP32")
    bad._parameters["binary_data_size"] = 400  # what a broken client might claim
    with pytest.raises(InferenceServerException, match="binary_data_size runs past"):
        await asyncio.to_thread(infer, client_args, [bad])


async def test_tritonclient_raises_the_servers_error_message(
    jp_serverapp: Any, client_args: dict[str, Any]
) -> None:
    await register(jp_serverapp, name="doubler", source=DOUBLER)
    client = triton.InferenceServerClient(url=client_args["url"], network_timeout=HANG_GUARD)
    try:
        with pytest.raises(InferenceServerException) as missing:
            await asyncio.to_thread(client.get_model_metadata, "nobody",
                                    headers=client_args["headers"])  # fmt: skip
        with pytest.raises(InferenceServerException) as no_route:
            await asyncio.to_thread(client.get_model_repository_index,
                                    headers=client_args["headers"])  # fmt: skip
    finally:
        client.close()
    assert (missing.value.status(), missing.value.message()) == ("404", "Model not found: nobody")
    assert (no_route.value.status(), no_route.value.message()) == ("404", NOT_FOUND_MESSAGE)
    wrong = tensor("f", np.array([1.0, 2.0], dtype=np.float32), "FP32")
    wrong.set_shape([3])
    with pytest.raises(InferenceServerException) as caught:
        await asyncio.to_thread(infer, client_args, [wrong])
    assert (caught.value.status(), caught.value.message()) == (
        "400",
        "Input f: 2 values do not fit shape [3].",
    )


async def test_tritonclient_compressed_requests_are_decompressed(
    jp_serverapp: Any, client_args: dict[str, Any]
) -> None:
    await register(jp_serverapp, name="doubler", source=DOUBLER)
    for algorithm in ("gzip", "deflate"):
        for binary in (True, False):
            inputs = [tensor("x", np.array([1, 2], dtype=np.int64), "INT64", binary=binary)]
            result = await asyncio.to_thread(infer, client_args, inputs,
                                             request_compression_algorithm=algorithm)  # fmt: skip
            assert result.as_numpy("x").tolist() == [2, 4], (algorithm, binary)


async def test_a_compressed_body_past_max_request_size_or_corrupt_is_refused(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp, name="doubler", source=DOUBLER)
    limit = jp_serverapp.web_app.settings["serve_app"].max_request_size
    bomb = gzip.compress(b" " * (limit + 1))  # a few KB on the wire
    cut = gzip.compress(b'{"inputs": []}')[:-5]
    for body, status in ((bomb, 413), (cut, 400), (b"\x1f\x8b junk", 400)):
        response = await jp_fetch("serve", "v2", "models", "doubler", "infer", method="POST",
                                  body=body, headers={"Content-Encoding": "gzip",
                                                      "Content-Type": "application/json"},
                                  raise_error=False)  # fmt: skip
        assert (response.code, json.loads(response.body)["code"]) == (status, status)
        assert json.loads(response.body)["error"]


async def test_a_binary_request_over_max_request_size_is_413(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp, name="doubler", source=DOUBLER)
    limit = jp_serverapp.web_app.settings["serve_app"].max_request_size
    raw = bytes(limit + 8)
    size = {"binary_data_size": len(raw)}
    inputs = [{"name": "x", "shape": [len(raw)], "datatype": "UINT8", "parameters": size}]
    header = json.dumps({"inputs": inputs}).encode()
    response = await jp_fetch(
        "serve", "v2", "models", "doubler", "infer", method="POST", body=header + raw,
        headers={"Inference-Header-Content-Length": str(len(header))}, raise_error=False,
    )  # fmt: skip
    assert response.code == 413


async def test_tritonclient_model_version_reaches_that_version(
    jp_serverapp: Any, client_args: dict[str, Any]
) -> None:
    await register(jp_serverapp, name="doubler", version="2.0", source=DOUBLER)
    inputs = [tensor("i", np.array([3], dtype=np.int64), "INT64")]
    result = await asyncio.to_thread(infer, client_args, inputs, model_version="2.0")
    assert result.get_response()["model_version"] == "2.0"
    assert result.as_numpy("i").tolist() == [6]


ARRAYS = """
import numpy as np
import torch


def handle(data, context):
    if not data:
        return None
    out = []
    for row in data:
        name, value = row.get("name", "torch"), row.get("data", row.get("body"))
        if name == "np-bool":
            out.append(~np.asarray(value))
        elif name == "np-scalar":
            out.append(np.float32(value[0]))
        elif name == "np":
            out.append(np.asarray(value) * 2)
        elif name == "bf16":
            out.append(torch.as_tensor(value, dtype=torch.bfloat16) * 2)
        else:
            out.append(torch.as_tensor(value) * 2)
    return out
"""


async def test_array_outputs_keep_their_values_shape_and_datatype(
    jp_fetch: Fetch, jp_serverapp: Any, client_args: dict[str, Any]
) -> None:
    """What a model's forward returns (torch tensors, numpy arrays) comes back as numbers:
    v2 output tensors of the array's shape and dtype, v1 predictions as nested lists."""
    await register(jp_serverapp, name="doubler", source=ARRAYS)
    square = np.array([[1.5, 2.0], [3.0, -4.25]], dtype=np.float32)
    inputs = [
        tensor("torch", square, "FP32"),
        tensor("np", np.array([[1, 2, 3]], dtype=np.int64), "INT64"),
        tensor("np-bool", np.array([True, False]), "BOOL", binary=False),
        tensor("bf16", np.array([1.5, -3.0], dtype=np.float32), "FP32"),
        tensor("np-scalar", np.array([7.5], dtype=np.float32), "FP32"),
    ]
    result = await asyncio.to_thread(infer, client_args, inputs)
    kinds = {out["name"]: (out["datatype"], out["shape"])
             for out in result.get_response()["outputs"]}  # fmt: skip
    assert kinds == {"torch": ("FP32", [2, 2]), "np": ("INT64", [1, 3]),
                     "np-bool": ("BOOL", [2]), "bf16": ("BF16", [2]),
                     "np-scalar": ("FP32", [])}  # fmt: skip
    assert result.as_numpy("torch").tolist() == (square * 2).tolist()
    assert result.as_numpy("np").tolist() == [[2, 4, 6]]
    assert result.as_numpy("np-bool").tolist() == [False, True]
    assert result.as_numpy("bf16").astype(np.float32).tolist() == [3.0, -6.0]
    assert result.as_numpy("np-scalar").tolist() == 7.5
    v1 = await jp_fetch("serve", "v1", "models", "doubler:predict", method="POST",
                        body=json.dumps({"instances": [[1, 2], [[0.5]]]}))  # fmt: skip
    assert json.loads(v1.body) == {"predictions": [[2, 4], [[1.0]]]}
