"""A handler's array outputs (torch tensors, numpy arrays) as KServe answers, in the worker.

A model's forward returns tensors, and a handler written for it often returns them as
they are: `[torch.as_tensor(row["data"]) * 2 for row in data]`. TorchServe would send
a tensor's `torch.save` bytes (and refuse a numpy array), which no KServe client can
read. On the KServe routes (the rows of an envelope the worker opened,
`worker/kserve.py`), each top-level array output is turned, before it is encoded, into
its nested lists (`tolist()`, what a v1 `predictions` entry holds) and, when its dtype
has one, its v2 datatype and shape, carried to `collect` in the row's `TENSOR_HEADER`
response header (the answer is built anew, so the header never leaves the worker).
The v2 output then keeps the array's shape and datatype, as Triton answers a model's
output tensor; TorchServe 0.12's `kservev2` envelope flattens it (`np.array(item)
.flatten()`), which loses the shape a tritonclient user reshapes with.

torch and numpy are looked for only when already imported (the handler's own), so this
costs nothing to a handler that uses neither. Other outputs, and arrays answering
other routes, are left as they are (TorchServe's encoding, `worker/outputs.py`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection
from typing import Any, NamedTuple

from jupyter_serve.worker.context import Context

__all__ = ["TENSOR_HEADER", "ArrayOutput", "array_output", "array_outputs", "tensor_kind"]

TENSOR_HEADER = "X-Jupyter-Serve-Tensor"
"""A KServe row's response header: `[datatype, shape]` of its array output (JSON)."""

TORCH_DATATYPES = {
    "torch.bool": "BOOL", "torch.uint8": "UINT8", "torch.uint16": "UINT16",
    "torch.uint32": "UINT32", "torch.uint64": "UINT64", "torch.int8": "INT8",
    "torch.int16": "INT16", "torch.int32": "INT32", "torch.int64": "INT64",
    "torch.float16": "FP16", "torch.bfloat16": "BF16", "torch.float32": "FP32",
    "torch.float64": "FP64",
}  # fmt: skip
NUMPY_KINDS = {"b": "BOOL", "u": "UINT", "i": "INT", "f": "FP"}  # dtype.kind: sized by itemsize
NUMPY_SIZES = {"BOOL": (1,), "UINT": (1, 2, 4, 8), "INT": (1, 2, 4, 8), "FP": (2, 4, 8)}


class ArrayOutput(NamedTuple):
    """An array output: its values as nested lists, its v2 datatype (None: it has none)
    and its shape."""

    values: Any
    datatype: str | None
    shape: list[int]


def array_outputs(outputs: Any, context: Context, kserve_ids: Collection[str]) -> Any:
    """`outputs` with each array answering a KServe row (its request id in `kserve_ids`)
    as its nested lists, its datatype and shape in the row's `TENSOR_HEADER`; anything
    that is no list of one item per row is left for `build_results` to refuse."""
    if not kserve_ids or not isinstance(outputs, list):
        return outputs
    if len(outputs) != len(context.request_ids):
        return outputs
    converted = list(outputs)
    for idx, item in enumerate(outputs):
        found = array_output(item) if context.request_ids.get(idx) in kserve_ids else None
        if found is None:
            continue
        converted[idx] = found.values
        if found.datatype is not None:
            context.set_response_header(idx, TENSOR_HEADER,
                                        json.dumps([found.datatype, found.shape]))  # fmt: skip
    return converted


def array_output(item: Any) -> ArrayOutput | None:
    """`item` as an `ArrayOutput` when it is a torch tensor or a numpy array (or numpy
    scalar), else None."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(item, torch.Tensor):
        if item.layout != torch.strided or item.is_complex() or item.is_quantized:
            return None  # left to TorchServe's encoding
        values = item.detach().cpu().tolist()
        return ArrayOutput(values, TORCH_DATATYPES.get(str(item.dtype)), list(item.shape))
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(item, numpy.ndarray | numpy.generic):
        return ArrayOutput(item.tolist(), tensor_kind(item.dtype), list(item.shape))
    return None


def tensor_kind(dtype: Any) -> str | None:
    """The v2 datatype of a numpy dtype (unicode strings: BYTES); None when it has none."""
    if dtype.kind == "U":
        return "BYTES"
    family = NUMPY_KINDS.get(dtype.kind)
    if family is None or dtype.itemsize not in NUMPY_SIZES[family]:
        return None
    return family if family == "BOOL" else f"{family}{8 * dtype.itemsize}"
