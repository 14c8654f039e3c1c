"""KServe v1 and v2 (Open Inference Protocol) routes, with the envelopes applied natively.

TorchServe forwards these bodies untouched and lets a backend envelope
(`service_envelope=kserve` / `kservev2`) turn the body into the handler's batch.
Here the route does it, so every model answers these routes without a setting:

* v1 `{"instances": [i0, i1, ...]}`: each instance is one batch item, exactly the
  row the handler sees under TorchServe's envelope (a JSON object's keys become
  the row's keys; anything else is the row's "body"). The answer is
  `{"predictions": [...]}` (or `"explanations"` for `:explain`), one per instance.
* v2 `{"id"?, "inputs": [{name, shape, datatype, data}, ...]}`: each input is one
  batch item (its data reshaped to `shape`; BYTES inputs pass `data[0]`). The
  answer is `{"id", "model_name", "model_version", "outputs"}`, each output
  flattened with its input's name, as TorchServe's `kservev2` envelope does.
  The binary tensor extension (`oip`: `Inference-Header-Content-Length`,
  `binary_data_size`, binary outputs on request) works both ways, as in KServe's
  Python server and Triton; a binary BYTES input reaches the handler as a
  `bytearray` (a raw parameter), as TorchServe passes raw bodies.
  `v2/models/{m}/versions/{v}/infer` (and `/explain`) serve that version, as KServe and
  Triton do (TorchServe 0.12 answers 501); other versioned v2 paths stay 501.

Items go through the model's batcher one by one, so they batch with other
traffic up to the model's batch size. A handler output that is JSON is used
as the value; other text as a string. A malformed envelope is a 400.

A body that is no envelope at all (not JSON, or without `instances` / `inputs`)
is served as TorchServe serves these routes without `service_envelope`: the
body is the handler's one row, the `explain` header is set, and the handler's
answer goes back as is, so handlers written for plain TorchServe keep working.

With `service_envelope` set (`ServeApp.service_envelope` or config.properties), the
worker wraps every handler in that envelope, as TorchServe's does, and these routes
pass every body to it untouched: the answer is whatever the envelope makes of it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
from typing import Any

from .._version import __version__
from ..errors import BadRequest
from ..oip import (
    BINARY_HEADER,
    BINARY_TYPE,
    BinaryDataError,
    binary_response,
    flatten,
    read_binary_request,
    typed_data,
)
from ..protocol import InferenceRequest, InferenceResult, Parameter
from ..registry import Model
from .access import EXECUTE, READ, allow
from .base import ServeRoute
from .exchange import Job, Served, find_model
from .inference import HandlerWriter, InferenceRoute
from .requests import to_inference_request

JSON_TYPE = "application/json"
VERSIONING = "Model versioning is not yet supported."
TOO_DEEP = "The request body nests too deeply."
MAX_DIMS = 64  # a v2 tensor's dimensions (numpy allows 64)


def _envelope(body: bytes, key: str) -> tuple[dict[str, Any], list[Any]] | None:
    """The parsed envelope and its `key` list; None when the body is no envelope at all.

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
    return data, data[key]


def _item_parameters(item: Any) -> tuple[Parameter, ...]:
    """One batch row: an object's keys as JSON parameters, anything else as "body"."""
    fields = item if isinstance(item, dict) else {"body": item}
    try:
        return tuple(
            Parameter(str(name), BINARY_TYPE, bytes(value))
            if isinstance(value, bytes)
            else Parameter(str(name), JSON_TYPE, json.dumps(value).encode())
            for name, value in fields.items()
        )
    except RecursionError:
        raise BadRequest(TOO_DEEP) from None


def _output_value(body: bytes) -> Any:
    """A handler's encoded output as a JSON value: JSON as is, text as a string."""
    try:
        return json.loads(body)
    except ValueError:
        pass
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii")


def _reshape(flat: list[Any], shape: list[int]) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = math.prod(shape[1:])
    return [_reshape(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def _input_row(tensor: Any) -> dict[str, Any]:
    """A v2 input as the handler's row: data reshaped to its shape (BYTES: data[0])."""
    if not isinstance(tensor, dict) or "data" not in tensor:
        raise BadRequest(
            'Each v2 input must be an object with "name", "shape", "datatype", "data".'
        )
    row = dict(tensor)
    flat, shape = flatten(row["data"]), _shape(row)
    if row.get("datatype") == "BYTES":
        if not flat:
            raise BadRequest(f"Input {row.get('name')}: a BYTES tensor without data.")
        row["data"] = flat[0]
        return row
    if shape and math.prod(shape) != len(flat):
        raise BadRequest(f"Input {row.get('name')}: {len(flat)} values do not fit shape {shape}.")
    row["data"] = _reshape(flat, shape)
    return row


def _shape(row: dict[str, Any]) -> list[int]:
    """A v2 input's shape: at most `MAX_DIMS` non-negative integers, else 400."""
    shape = row.get("shape") or []
    dims = [_dim(n) for n in shape] if isinstance(shape, list) and len(shape) <= MAX_DIMS else []
    if not isinstance(shape, list) or len(dims) != len(shape) or None in dims:
        raise BadRequest(
            f"Input {str(row.get('name'))[:80]}: shape must be a list of at most {MAX_DIMS} "
            "non-negative integers."
        )
    return [dim for dim in dims if dim is not None]


def _dim(value: Any) -> int | None:
    """One dimension as pydantic's lax int reads it (3, 3.0, "3"); None when it is none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


def _v2_output(name: str, value: Any) -> dict[str, Any]:
    kind, data = typed_data(flatten(value))
    return {"name": name, "shape": [len(data)], "datatype": kind, "data": data}


class KServeRoute(InferenceRoute):
    """Runs one envelope's items through the batcher; a failed item answers for all.

    A body without envelope goes through the route's `Exchange` as a prediction does.
    An envelope's items are gathered here instead (nothing streams into an envelope):
    past `clientTimeoutInMills` they are dropped and nothing is sent, as TorchServe does.
    """

    _served: Served | None = None  # the gathered answer is counted under these labels
    _queue_ms = 0.0
    _items: asyncio.Future[list[InferenceResult]] | None = None
    _left: asyncio.Future[None] | None = None
    version: str | None = None  # the version a versioned v2 path names

    async def run_items(self, name: str, items: list[Any], explain: bool) -> list[Any] | None:
        """The handler's outputs for `items`, or None when the answer was sent (a non-2xx
        result) or will not be (dropped, or the client has gone)."""
        served = self._served = find_model(self.settings, name, self.version)
        served.check_workers()
        base = to_inference_request(self.request, self.request_id, explain=explain)
        requests = [
            InferenceRequest(self.request_id, base.headers, _item_parameters(item))
            for item in items
        ]
        results = await self.gather(served, requests) if requests else []
        if results is None:
            return None
        failed = next((result for result in results if not 200 <= result.status < 300), None)
        if failed is not None:
            HandlerWriter(self).answer(failed)
            return None
        return [_output_value(result.body) for result in results]

    async def gather(
        self, served: Served, requests: list[InferenceRequest]
    ) -> list[InferenceResult] | None:
        """Every request's result, in order; None when nothing is to be sent."""
        self._items = asyncio.gather(*(served.submit(request) for request in requests))
        timeout_ms = served.model.spec.client_timeout_ms
        try:
            results = await asyncio.wait_for(self._items, timeout_ms / 1000 or None)
        except asyncio.TimeoutError:  # the items are cancelled: queued ones never run
            self.log.warning("Drop response for inference request %s due to client timeout",
                             self.request_id)  # fmt: skip
            self._served = None  # TorchServe sends nothing, and counts nothing
            await self.client_left()
            return None
        except asyncio.CancelledError:
            if not self._gone:
                raise
            self._served = None
            return None
        self._queue_ms = max((result.queue_ms for result in results), default=0.0)
        return results

    async def client_left(self) -> None:
        """Wait until the client has closed the connection."""
        if not self._gone:
            self._left = asyncio.get_running_loop().create_future()
            await self._left

    def on_connection_close(self) -> None:
        if self._items is not None:
            self._items.cancel()  # the batcher skips the items still queued
        if self._left is not None and not self._left.done():
            self._left.set_result(None)
        super().on_connection_close()

    def on_finish(self) -> None:
        if self._served is not None:
            self._served.record(self.get_status(), self._queue_ms)
        super().on_finish()

    def enveloped_by_worker(self, name: str) -> bool:
        """With `service_envelope` set, TorchServe's worker reads the envelope: pass it on."""
        return bool(self.registry.get(name, self.version).spec.envelope)

    async def pass_through(self, name: str, explain: bool) -> None:
        """No envelope: the request and the answer as TorchServe without `service_envelope`."""

        def prepare() -> Job:
            request = to_inference_request(self.request, self.request_id, explain=explain)
            return Job(name, self.version, request)

        await self.respond(prepare)


class V1InferRoute(KServeRoute):
    """`POST v1/models/{m}:predict` and `:explain`."""

    @allow(EXECUTE)
    async def post(self, name: str, action: str) -> None:
        explain = action == "explain"
        envelope = None if self.enveloped_by_worker(name) else _envelope(self.request.body,
                                                                          "instances")  # fmt: skip
        if envelope is None:
            await self.pass_through(name, explain)
            return
        outputs = await self.run_items(name, envelope[1], explain)
        if outputs is not None:
            self.write_json({"explanations" if explain else "predictions": outputs})


class V2InferRoute(KServeRoute):
    """`POST v2/models/{m}[/versions/{v}]/infer` and `/explain` (a version named in the path is
    served, as KServe and Triton serve it; TorchServe 0.12 answers those paths 501)."""

    @allow(EXECUTE)
    async def post(self, name: str, *version_and_action: str) -> None:
        *version, action = version_and_action
        self.version = version[0] if version else None
        envelope = None if self.enveloped_by_worker(name) else self.v2_envelope()
        if envelope is None:
            await self.pass_through(name, action == "explain")
            return
        data, inputs = envelope
        rows = [_input_row(tensor) for tensor in inputs]
        outputs = await self.run_items(name, rows, action == "explain")
        if outputs is None:
            return
        spec = self.registry.get(name, self.version).spec
        names = [str(row.get("name", f"input-{i}")) for i, row in enumerate(rows)]
        response = {
            "id": str(data.get("id") or "").strip() or self.request_id,
            "model_name": spec.model_name,
            "model_version": spec.version,
            "outputs": [_v2_output(n, v) for n, v in zip(names, outputs, strict=True)],
        }
        self.write_v2(response, data)

    def v2_envelope(self) -> tuple[dict[str, Any], list[Any]] | None:
        """The v2 request and its inputs, binary data read in; None when it is none."""
        header_length = self.request.headers.get(BINARY_HEADER)
        if header_length is None:
            return _envelope(self.request.body, "inputs")
        try:
            request = read_binary_request(self.request.body, header_length)
        except RecursionError:
            raise BadRequest(TOO_DEEP) from None
        except (BinaryDataError, ValueError) as exc:
            raise BadRequest(f"Invalid binary tensor request: {exc}") from None
        return request, request["inputs"]

    def write_v2(self, response: dict[str, Any], request: dict[str, Any]) -> None:
        """The response as JSON, or with the outputs the request asked for as binary data."""
        try:
            body, header_length = binary_response(response, request)
        except (ValueError, TypeError, OverflowError) as exc:  # e.g. BYTES values as BOOL
            raise BadRequest(f"An output cannot be sent as binary data: {exc}") from None
        if header_length is None:
            self.write_json(response)
            return
        self.set_header(BINARY_HEADER, str(header_length))
        self.finish(body, set_content_type=BINARY_TYPE)


class ModelReadyRoute(ServeRoute):
    """`GET v2/models/{m}/ready`: {"name", "ready"}, ready when a worker serves."""

    @allow(READ)
    def get(self, name: str) -> None:
        model = self.registry.get(name)
        self.write_json({"name": name, "ready": self.ready(model)})

    def ready(self, model: Model) -> bool:
        return model.pool.healthy_count > 0


class V1ModelReadyRoute(ModelReadyRoute):
    """`GET v1/models/{m}`: TorchServe's KServe v1 readiness, true once the model has
    workers at all (starting ones included), as its management API answers it."""

    def ready(self, model: Model) -> bool:
        return model.pool.worker_count > 0


class ModelMetadataRoute(ServeRoute):
    """`GET v2/models/{m}`: the Open Inference Protocol model metadata."""

    @allow(READ)
    def get(self, name: str) -> None:
        self.registry.get(name)
        versions = [model.version for model in self.registry.versions(name)]
        self.write_json(
            {"name": name, "versions": versions, "platform": "pytorch", "inputs": [], "outputs": []}
        )


class ServerMetadataRoute(ServeRoute):
    """`GET v2`: TorchServe's server metadata (its "extenstion" typo included)."""

    @allow(READ)
    def get(self) -> None:
        self.write_json(
            {"name": "Torchserve", "version": __version__, "extenstion": ["kserve", "kubeflow"]}
        )


class LiveRoute(ServeRoute):
    @allow(READ)
    def get(self) -> None:
        self.write_json({"live": True})


class ReadyRoute(ServeRoute):
    """`GET v2/health/ready`: ready when every model has its minimum of workers."""

    @allow(READ)
    def get(self) -> None:
        self.write_json({"ready": self.registry.healthy()})


class VersionedRoute(ServeRoute):
    """`v2/models/{m}/versions/...` but infer and explain: 501, as TorchServe answers."""

    @allow(READ)
    def _unsupported(self, *args: str) -> None:
        self.write_json({"error": VERSIONING}, status=501)

    get = post = put = delete = _unsupported


ROUTES: list[tuple[str, type[Any]]] = [
    (r"v1/models/([^/:%]+)(?::|%3[Aa])(predict|explain)", V1InferRoute),  # ":" maybe quoted
    (r"v1/models/([^/:]+)", V1ModelReadyRoute),
    (r"v2/?", ServerMetadataRoute),
    (r"v2/health/live", LiveRoute),
    (r"v2/health/ready", ReadyRoute),
    (r"v2/models/([^/]+)/versions/([^/]+)/(infer|explain)", V2InferRoute),
    (r"v2/models/([^/]+)/versions/.+", VersionedRoute),
    (r"v2/models/([^/]+)/(infer|explain)", V2InferRoute),
    (r"v2/models/([^/]+)/ready", ModelReadyRoute),
    (r"v2/models/([^/]+)", ModelMetadataRoute),
]
