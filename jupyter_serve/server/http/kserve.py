"""KServe v1 and v2 (Open Inference Protocol) routes, with the envelopes applied natively.

TorchServe forwards these bodies untouched and lets a backend envelope
(`service_envelope=kserve` / `kservev2`) turn the body into the handler's batch.
Here the worker opens them (worker/kserve.py), so every model answers these routes
without a setting:

* v1 `{"instances": [i0, i1, ...]}`: each instance is one row of the handler's
  batch, exactly the row the handler sees under TorchServe's envelope (a JSON
  object's keys become the row's keys; anything else is the row's "body"). The
  answer is `{"predictions": [...]}` (or `"explanations"` for `:explain`), one per
  instance.
* v2 `{"id"?, "inputs": [{name, shape, datatype, data}, ...]}`: each input is one
  row (its data reshaped to `shape`; BYTES inputs pass `data[0]`). The answer is
  `{"id", "model_name", "model_version", "outputs"}`, each output flattened with its
  input's name, as TorchServe's `kservev2` envelope does (a torch tensor or numpy array
  keeps its shape and datatype: worker/kserve_outputs.py). The binary tensor
  extension (`oip`: `Inference-Header-Content-Length`, `binary_data_size`, binary
  outputs on request) works both ways, as in KServe's Python server and Triton.
  `v2/models/{m}/versions/{v}/infer` (and `/explain`) serve that version, as KServe and
  Triton do (TorchServe 0.12 answers 501); other versioned v2 paths stay 501.

A request is one job of the model's queue, its body forwarded as it came with the
`X-Jupyter-Serve-Kserve` header (protocol.py) saying how to open it: the Jupyter
server's loop never parses, decompresses (`Content-Encoding: gzip`/`deflate`, to at most
`max_request_size` bytes) or decodes a KServe body, whatever its size or shape (its
kernels, files and terminals share that loop). The worker refuses, before building
anything, a malformed envelope (400), a shape that cannot describe its data (400),
tensors past `max_tensor_elements` (413) and more items than the queue takes now
(the queue's 503). Its rows go to the handler in one call; a failed row answers for
its whole request.

A body that is no envelope at all (not JSON, or without `instances` / `inputs`)
is served as TorchServe serves these routes without `service_envelope`: the
body is the handler's one row, the `explain` header is set, and the handler's
answer goes back as is, so handlers written for plain TorchServe keep working.

With `service_envelope` set (`ServeApp.service_envelope` or config.properties), the
worker wraps every handler in that envelope, as TorchServe's does, and these routes
pass every body to it untouched: the answer is whatever the envelope makes of it.

Errors on these routes (`KServeErrors`, `KServeWriter`) are TorchServe's JSON with the
`"error"` key KServe's and Triton's clients read (KServe's servers answer
`{"error": message}`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from jupyter_serve._version import TORCHSERVE_VERSION
from jupyter_serve.server.http.access import EXECUTE, READ, allow
from jupyter_serve.server.http.base import NOT_FOUND_MESSAGE, ServeRoute
from jupyter_serve.server.http.exchange import Job, Writer
from jupyter_serve.server.http.inference import HandlerWriter, InferenceRoute
from jupyter_serve.server.http.openai import retrieve_model
from jupyter_serve.server.http.requests import raw_body_request, to_inference_request
from jupyter_serve.server.registry import Model
from jupyter_serve.wire.errors import (
    DEFAULT_MAX_REQUEST_SIZE,
    ResourceNotFound,
    ServeError,
    torchserve_json,
)
from jupyter_serve.wire.oip import DEFAULT_MAX_TENSOR_ELEMENTS
from jupyter_serve.wire.protocol import KSERVE_HEADER, InferenceResult

VERSIONING = "Model versioning is not yet supported."
ERROR_SCAN = 65536  # the largest error answer read for its message (worker errors are small)


def error_json(doc: dict[str, Any]) -> bytes:
    """TorchServe's error JSON `doc` with the `"error"` KServe's and Triton's clients read:
    its message, and its cause when it has one."""
    cause = doc.get("cause")
    error = f"{doc['message']}: {cause}" if isinstance(cause, str) and cause else doc["message"]
    return torchserve_json({**doc, "error": error})


class KServeErrors(ServeRoute):
    """Base of the KServe routes: an error body is TorchServe's `{"code", "type", "message"}`
    with the `"error"` the KServe and Triton clients read (tritonclient reads nothing else:
    without it every error it raises says only that it could not decode the answer)."""

    def error_body(self, error: ServeError) -> bytes:
        return error_json(error.to_json())


class KServeWriter(HandlerWriter):
    """A KServe answer, an error the worker sent (TorchServe's JSON) with its `"error"`."""

    def answer(self, result: InferenceResult) -> None:
        if result.status >= 400:
            result = replace(result, body=_with_error(result))
        super().answer(result)


def _with_error(result: InferenceResult) -> bytes:
    """An error result's body with `"error"` when it is TorchServe's error JSON (a handler's
    own error answer, anything else, is sent as it is)."""
    body = bytes(result.body)
    if len(body) > ERROR_SCAN:
        return body
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return body
    if not isinstance(doc, dict) or "error" in doc or not isinstance(doc.get("message"), str):
        return body
    return error_json(doc)


class KServeRoute(KServeErrors, InferenceRoute):
    """Forwards a KServe request to the model's worker as one job (module docstring)."""

    version: str | None = None  # the version a versioned v2 path names

    async def forward(self, name: str, protocol: str, explain: bool) -> None:
        """The request through the model's `Exchange` (404, 503, 413, the queue, timeouts,
        metrics, as a prediction), marked for the worker to open unless the model's own
        `service_envelope` reads it."""

        def prepare() -> Job:
            model = self.registry.get(name, self.version)
            if model.spec.envelope:  # TorchServe's envelope reads the request as it reads any
                return Job(name, self.version, to_inference_request(self.request,
                           self.request_id, explain=explain))  # fmt: skip
            request = raw_body_request(self.request, self.request_id, explain=explain)
            request.headers[KSERVE_HEADER] = self.how_to_open(model, protocol)
            return Job(name, self.version, request)

        await self.respond(prepare)

    def make_writer(self) -> Writer:
        return KServeWriter(self)

    def how_to_open(self, model: Model, protocol: str) -> str:
        """The `KSERVE_HEADER` value: the protocol, what the request may build, who answers."""
        app = self.settings.get("serve_app")
        max_elements = getattr(app, "max_tensor_elements", DEFAULT_MAX_TENSOR_ELEMENTS)
        max_bytes = getattr(app, "max_request_size", DEFAULT_MAX_REQUEST_SIZE)
        return json.dumps({
            "protocol": protocol, "room": model.batcher.remaining_capacity,
            "max_elements": int(max_elements), "model": [model.spec.model_name, model.version],
            "max_bytes": int(max_bytes),
        })  # fmt: skip


class V1InferRoute(KServeRoute):
    """`POST v1/models/{m}:predict` and `:explain`."""

    @allow(EXECUTE)
    async def post(self, name: str, action: str) -> None:
        await self.forward(name, "v1", action == "explain")


class V2InferRoute(KServeRoute):
    """`POST v2/models/{m}[/versions/{v}]/infer` and `/explain` (a version named in the path is
    served, as KServe and Triton serve it; TorchServe 0.12 answers those paths 501)."""

    @allow(EXECUTE)
    async def post(self, name: str, *version_and_action: str) -> None:
        *version, action = version_and_action
        self.version = version[0] if version else None
        await self.forward(name, "v2", action == "explain")


class ModelReadyRoute(KServeErrors):
    """`GET v2/models/{m}/ready`: {"name", "ready"}, ready when a worker serves."""

    @allow(READ)
    def get(self, name: str) -> None:
        model = self.registry.get(name)
        self.write_json({"name": name, "ready": self.ready(model)})

    def ready(self, model: Model) -> bool:
        return model.pool.healthy_count > 0


class V1ModelReadyRoute(ModelReadyRoute):
    """`GET v1/models/{m}`: TorchServe's KServe v1 readiness, true once the model has
    workers at all (starting ones included), as its management API answers it; a language
    model's answer also carries OpenAI's model object (openai.py, `models.retrieve`)."""

    @allow(READ)
    def get(self, name: str) -> None:
        model, openai_fields = retrieve_model(self.registry, name)
        self.write_json({**openai_fields, "name": name, "ready": self.ready(model)})

    def ready(self, model: Model) -> bool:
        return model.pool.worker_count > 0


class ModelMetadataRoute(KServeErrors):
    """`GET v2/models/{m}`: the Open Inference Protocol model metadata."""

    @allow(READ)
    def get(self, name: str) -> None:
        self.registry.get(name)
        versions = [model.version for model in self.registry.versions(name)]
        self.write_json(
            {"name": name, "versions": versions, "platform": "pytorch", "inputs": [], "outputs": []}
        )


class ServerMetadataRoute(KServeErrors):
    """`GET v2`: TorchServe's server metadata (its "extenstion" typo included)."""

    @allow(READ)
    def get(self) -> None:
        self.write_json(
            {
                "name": "Torchserve",
                "version": TORCHSERVE_VERSION,
                "extenstion": ["kserve", "kubeflow"],
            }
        )


class LiveRoute(KServeErrors):
    @allow(READ)
    def get(self) -> None:
        self.write_json({"live": True})


class ReadyRoute(KServeErrors):
    """`GET v2/health/ready`: ready when every model has its minimum of workers."""

    @allow(READ)
    def get(self) -> None:
        self.write_json({"ready": self.registry.healthy()})


class VersionedRoute(KServeErrors):
    """`v2/models/{m}/versions/...` but infer and explain: 501, as TorchServe answers."""

    @allow(READ)
    def _unsupported(self, *args: str) -> None:
        self.write_json({"error": VERSIONING}, status=501)

    get = post = put = delete = _unsupported


class V2NotFoundRoute(KServeErrors):
    """Any other path under `v2/` (tritonclient's model config, repository index,
    statistics...): TorchServe's 404, with the `"error"` its clients read."""

    @allow(READ)
    def _not_found(self, *args: str) -> None:
        raise ResourceNotFound(NOT_FOUND_MESSAGE)

    get = post = put = delete = patch = head = _not_found


NOT_FOUND_ROUTE = (r"v2/.*", V2NotFoundRoute)
"""After every other route (a model named "v2" keeps its legacy `v2/predict`)."""

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
