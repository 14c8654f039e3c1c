"""KServe v1 and v2 envelopes into batch rows, and results into answers (worker side).

Every function here costs time in the size of a body or an answer, so they run in
the worker (`worker/kserve.py` opens the requests the server forwards unopened),
never on the Jupyter server's loop. What they may build is bounded before they
build it:

* an envelope with more items (v1 instances, v2 inputs) than the model's queue
  took when the request was queued is refused with the queue's own 503
  (`errors.queue_full`) before one item is built, and one without items with a 400;
* a v2 request's elements (and the lists its shapes nest them in) stay within
  `max_tensor_elements`, and its shapes must describe its data
  (`worker/kserve_tensors.py`), checked before anything is shaped or decoded;
* a v2 request's requested `outputs` must name outputs its answer has (400), and
  only those are answered;
* each item's fields are encoded as the JSON parameters the handler's row is
  decoded from (`worker/inputs.py`), as for a prediction with a JSON body, so a
  handler with `decode_input_request` off sees the same bytes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from jupyter_serve.wire.errors import BadRequest, queue_full, torchserve_json
from jupyter_serve.wire.oip import (
    BINARY_TYPE,
    BinaryDataError,
    binary_response,
    flatten,
    split_binary_request,
    typed_data,
)
from jupyter_serve.wire.protocol import Parameter
from jupyter_serve.worker.kserve_tensors import Budget, Encoded, input_row

__all__ = ["Items", "Limits", "v1_answer", "v1_items", "v2_answer", "v2_items"]

JSON_TYPE = "application/json"
TOO_DEEP = "The request body nests too deeply."
KEPT = ("id", "parameters", "outputs")  # what a v2 answer reads of its request


class Limits(NamedTuple):
    """What a request may build, read on the loop before its body is decoded."""

    model_name: str  # whose queue refuses too many items
    room: int  # the requests that queue takes now
    max_elements: int  # `ServeApp.max_tensor_elements`


class Items(NamedTuple):
    """An envelope's items as the handler's rows, ready to queue."""

    rows: list[tuple[Parameter, ...]]
    names: list[str]  # v2: each input's name, for its output
    request: dict[str, Any]  # v2: the request's `KEPT` keys, for the answer
    wanted: frozenset[str] | None = None  # v2: the outputs the request asks for (None: all)


def v1_items(body: bytes, limits: Limits) -> Items | None:
    """A v1 `{"instances": [...]}` body's instances as rows; None when it is no envelope."""
    found = _envelope(body, "instances")
    if found is None:
        return None
    instances: list[Any] = found["instances"]
    _check_items(instances, "instances", limits)
    return Items([item_parameters(item) for item in instances], [], {})


def v2_items(body: bytes, header_length: str | None, limits: Limits) -> Items | None:
    """A v2 body's inputs as rows (`header_length`: the binary extension's header);
    None when it is no envelope."""
    raw: dict[int, memoryview] = {}
    if header_length is None:
        found = _envelope(body, "inputs")
        if found is None:
            return None
        request = found
    else:
        request, raw = _binary(body, header_length)
    inputs: list[Any] = request["inputs"]
    _check_items(inputs, "inputs", limits)
    names = [str(tensor.get("name", f"input-{i}")) if isinstance(tensor, dict) else ""
             for i, tensor in enumerate(inputs)]  # fmt: skip
    wanted = requested_outputs(request.get("outputs"), names, limits.model_name)
    budget = Budget(limits.max_elements)
    try:
        rows = [input_row(tensor, raw.get(i), budget) for i, tensor in enumerate(inputs)]
    except BinaryDataError as exc:
        raise BadRequest(f"Invalid binary tensor request: {exc}") from None
    kept = {key: request[key] for key in KEPT if key in request}
    return Items([item_parameters(row) for row in rows], names, kept, wanted)


def requested_outputs(outputs: Any, names: list[str], model: str) -> frozenset[str] | None:
    """The names of the outputs a v2 request asks for (its `outputs`; None or [] asks for
    all), refused before anything is decoded when one is not among the answer's: each
    input's output has its name, and Triton answers an unknown output with a 400."""
    if outputs is None or outputs == []:
        return None
    if not isinstance(outputs, list) or not all(
        isinstance(output, dict) and isinstance(output.get("name"), str) for output in outputs
    ):
        raise BadRequest('The "outputs" of the request must be a list of objects with a "name".')
    known = set(names)
    for output in outputs:
        if output["name"] not in known:
            raise BadRequest(f"Unexpected inference output '{output['name'][:80]}' for model "
                             f"'{model}' (an output has the name of its input).")  # fmt: skip
    return frozenset(output["name"] for output in outputs)


def _check_items(items: list[Any], key: str, limits: Limits) -> None:
    """400 for an envelope without items (nothing to answer with), the queue's 503 for
    more than it takes."""
    if not items:
        raise BadRequest(f"The request has no {key}: its {key} list is empty.")
    if len(items) > limits.room:
        raise queue_full(limits.model_name)


def _envelope(body: bytes, key: str) -> dict[str, Any] | None:
    """The parsed envelope (its `key` a list); None when the body is no envelope at all.

    A JSON object whose `key` is not a list is a malformed envelope: 400.
    """
    try:
        data = json.loads(body or b"null")
    except ValueError:
        return None
    except RecursionError:
        raise BadRequest(TOO_DEEP) from None
    if not isinstance(data, dict) or key not in data:
        return None
    if not isinstance(data[key], list):
        raise BadRequest(f'The "{key}" of the request body must be a list.')
    return data


def _binary(body: bytes, header_length: str) -> tuple[dict[str, Any], dict[int, memoryview]]:
    """A binary request's JSON header and its inputs' binary data (nothing decoded)."""
    try:
        return split_binary_request(body, header_length)
    except RecursionError:
        raise BadRequest(TOO_DEEP) from None
    except (BinaryDataError, ValueError) as exc:
        raise BadRequest(f"Invalid binary tensor request: {exc}") from None


def item_parameters(item: Any) -> tuple[Parameter, ...]:
    """One batch row: an object's keys as JSON parameters, anything else as "body"."""
    fields = item if isinstance(item, dict) else {"body": item}
    try:
        return tuple(_parameter(str(name), value) for name, value in fields.items())
    except RecursionError:
        raise BadRequest(TOO_DEEP) from None


def _parameter(name: str, value: Any) -> Parameter:
    if isinstance(value, Encoded):
        return Parameter(name, JSON_TYPE, value.text)
    if isinstance(value, bytes):
        return Parameter(name, BINARY_TYPE, bytes(value))
    return Parameter(name, JSON_TYPE, json.dumps(value).encode())


def v1_answer(bodies: list[bytes], key: str) -> bytes:
    """`{key: [output, ...]}` (predictions or explanations), as TorchServe writes JSON."""
    return torchserve_json({key: [output_value(body) for body in bodies]})


def v2_answer(
    bodies: list[bytes],
    items: Items,
    model: tuple[str, str],
    request_id: str,
    kinds: Sequence[str | None] | None = None,
) -> tuple[bytes, int | None]:
    """The v2 answer of `model` (name, version) to `items`' request: the body, and its JSON
    header's length when some outputs go binary (as the request asked). `kinds`: each
    output's `[datatype, shape]` JSON when it was an array (`worker/kserve_outputs.py`)."""
    request = items.request
    kinds = kinds or [None] * len(bodies)
    response = {
        "id": str(request.get("id") or "").strip() or request_id,
        "model_name": model[0],
        "model_version": model[1],
        "outputs": [
            _v2_output(name, output_value(body), kind)
            for name, body, kind in zip(items.names, bodies, kinds, strict=True)
            if items.wanted is None or name in items.wanted
        ],
    }
    try:
        body, header_length = binary_response(response, request)
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. BYTES values as BOOL
        raise BadRequest(f"An output cannot be sent as binary data: {exc}") from None
    return (torchserve_json(response), None) if header_length is None else (body, header_length)


def _v2_output(name: str, value: Any, kind: str | None) -> dict[str, Any]:
    """An output tensor: an array's own datatype and shape (`kind`), else the flattened
    values with the datatype they imply, as TorchServe's `kservev2` envelope answers."""
    if kind is not None:
        datatype, shape = json.loads(kind)
        return {"name": name, "shape": shape, "datatype": datatype, "data": flatten(value)}
    datatype, data = typed_data(flatten(value))
    return {"name": name, "shape": [len(data)], "datatype": datatype, "data": data}


def output_value(body: bytes) -> Any:
    """A handler's encoded output as a JSON value: JSON as is, text as a string."""
    try:
        return json.loads(body)
    except ValueError:
        pass
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii")
