"""Tests for a handler's array outputs on the KServe routes (worker/kserve_outputs.py).

In-process: `array_outputs` on a real `Context`, then `expand`/`collect` as the worker
runs them, so the v2 answer carries each array's datatype and shape. The routes, with
real workers and tritonclient, are in test_routes_kserve_binary.py.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest
import torch

from jupyter_serve.wire.protocol import KSERVE_HEADER, InferenceRequest, Parameter
from jupyter_serve.worker.context import Context
from jupyter_serve.worker.kserve import expand
from jupyter_serve.worker.kserve_outputs import TENSOR_HEADER, array_output, array_outputs
from jupyter_serve.worker.outputs import build_results

NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}  # fmt: skip
TORCH = {
    "BOOL": torch.bool, "UINT8": torch.uint8, "INT8": torch.int8, "INT16": torch.int16,
    "INT32": torch.int32, "INT64": torch.int64, "FP16": torch.float16,
    "BF16": torch.bfloat16, "FP32": torch.float32, "FP64": torch.float64,
}  # fmt: skip


@pytest.mark.parametrize("datatype", sorted(NUMPY))
def test_numpy_arrays_keep_their_datatype_and_shape(datatype: str) -> None:
    array = np.arange(6).reshape(2, 3, 1).astype(NUMPY[datatype])
    assert array_output(array) == (array.tolist(), datatype, [2, 3, 1])


@pytest.mark.parametrize("datatype", sorted(TORCH))
def test_torch_tensors_keep_their_datatype_and_shape(datatype: str) -> None:
    tensor = (
        torch.arange(6)
        .reshape(3, 2)
        .to(TORCH[datatype])
        .requires_grad_(TORCH[datatype].is_floating_point)
    )
    assert array_output(tensor) == (tensor.tolist(), datatype, [3, 2])


def test_scalars_strings_and_dtypes_without_a_datatype() -> None:
    assert array_output(np.float32(2.5)) == (2.5, "FP32", [])
    assert array_output(torch.tensor(3)) == (3, "INT64", [])
    assert array_output(np.array(["a", "bc"])) == (["a", "bc"], "BYTES", [2])
    assert array_output(np.array([1 + 2j])) == ([1 + 2j], None, [1])  # lists, no datatype
    assert array_output(torch.tensor([1 + 2j])) is None  # left to TorchServe's torch.save
    assert array_output([1, 2]) is None


def context(*request_ids: str) -> Context:
    return Context("m", "/nowhere", {}, 8, None, "1").with_requests(
        list(request_ids), [{} for _ in request_ids]
    )


def test_only_kserve_rows_are_converted_the_others_keep_torchserves_encoding() -> None:
    ctx = context("plain", "k")
    tensor = torch.tensor([[1.0, 2.0]])
    results = build_results(array_outputs([tensor, tensor], ctx, {"k"}), ctx)
    saved = io.BytesIO()
    torch.save(tensor, saved)
    assert results[0].body == saved.getvalue()
    assert TENSOR_HEADER not in results[0].headers
    assert (json.loads(results[1].body), results[1].headers[TENSOR_HEADER]) == (
        [[1.0, 2.0]],
        '["FP32", [1, 2]]',
    )


def test_outputs_that_answer_no_batch_are_left_for_build_results_to_refuse() -> None:
    ctx = context("k")
    outputs: list[Any] = [np.zeros(1), np.zeros(1)]
    assert array_outputs(outputs, ctx, {"k"}) is outputs
    assert array_outputs("no list", ctx, {"k"}) == "no list"


def test_the_v2_answer_has_the_arrays_datatype_and_shape() -> None:
    how = {"protocol": "v2", "room": 10, "max_elements": 100, "model": ["m", "1"]}
    tensor = {"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}
    body = json.dumps({"inputs": [tensor, {**tensor, "name": "y"}]}).encode()
    request = InferenceRequest("r1", {KSERVE_HEADER: json.dumps(how)},
                               (Parameter("body", "application/json", body),))  # fmt: skip
    batch = expand([request])
    ctx = context("r1", "r1")
    outputs = [np.array([[2, 4], [6, 8]], np.uint8), [[2, 4], [6, 8]]]  # an array, a list
    (answer,) = batch.collect(build_results(array_outputs(outputs, ctx, batch.opened_ids), ctx))
    assert TENSOR_HEADER not in answer.headers
    x, y = json.loads(answer.body)["outputs"]
    assert x == {"name": "x", "shape": [2, 2], "datatype": "UINT8", "data": [2, 4, 6, 8]}
    assert y == {"name": "y", "shape": [4], "datatype": "INT64", "data": [2, 4, 6, 8]}
