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

Nothing a caller sends stalls the Jupyter server's one event loop: bodies are parsed,
tensors decoded and shaped, and answers encoded in a decode thread, a bounded number
at a time (`routes/offloop.py`); an envelope with more items than the model's queue
takes is refused with the queue's 503 before any item is built (`routes/kserve_codec.py`);
a v2 shape that cannot describe its data is a 400 and a request past
`max_tensor_elements` a 413, both found before anything is shaped
(`routes/kserve_tensors.py`).

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
from typing import Any

from .._version import __version__
from ..oip import BINARY_HEADER, BINARY_TYPE, DEFAULT_MAX_TENSOR_ELEMENTS
from ..protocol import InferenceRequest, InferenceResult, Parameter
from ..registry import Model
from .access import EXECUTE, READ, allow
from .base import ServeRoute
from .exchange import Job, Served, find_model
from .inference import HandlerWriter, InferenceRoute
from .kserve_codec import JSON_TYPE, Items, Limits, v1_answer, v1_items, v2_answer, v2_items
from .offloop import DECODES
from .requests import to_inference_request

VERSIONING = "Model versioning is not yet supported."


class KServeRoute(InferenceRoute):
    """Runs one envelope's items through the batcher; a failed item answers for all.

    A body without envelope goes through the route's `Exchange` as a prediction does.
    An envelope's items are gathered here instead (nothing streams into an envelope):
    past `clientTimeoutInMills` they are dropped and nothing is sent, as TorchServe does.
    Bodies are decoded and answers encoded off the loop (`DECODES`, routes/offloop.py).
    """

    _served: Served | None = None  # the gathered answer is counted under these labels
    _queue_ms = 0.0
    _items: asyncio.Future[list[InferenceResult]] | None = None
    _left: asyncio.Future[None] | None = None
    version: str | None = None  # the version a versioned v2 path names

    def reach(self, name: str) -> tuple[Served, Limits]:
        """The model version this request reaches (404, and 503 without a worker), and what
        its body may build (read here, on the loop, before the body is decoded)."""
        served = self._served = find_model(self.settings, name, self.version)
        served.check_workers()
        app = self.settings.get("serve_app")
        batcher = served.model.batcher
        max_elements = getattr(app, "max_tensor_elements", DEFAULT_MAX_TENSOR_ELEMENTS)
        return served, Limits(batcher.model_name, batcher.remaining_capacity, int(max_elements))

    async def run_items(
        self, served: Served, rows: list[tuple[Parameter, ...]], explain: bool
    ) -> list[bytes] | None:
        """The handler's output bodies for `rows`, or None when the answer was sent (a
        non-2xx result) or will not be (dropped, or the client has gone)."""
        if self._gone:
            return None
        base = to_inference_request(self.request, self.request_id, explain=explain)
        requests = [InferenceRequest(self.request_id, base.headers, row) for row in rows]
        served.model.batcher.check_room(len(requests))  # all of them are queued, or none
        results = await self.gather(served, requests) if requests else []
        if results is None:
            return None
        failed = next((result for result in results if not 200 <= result.status < 300), None)
        if failed is not None:
            HandlerWriter(self).answer(failed)
            return None
        return [result.body for result in results]

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

        self._served = None  # the exchange counts its answer itself
        await self.respond(prepare)

    def finish_encoded(self, body: bytes, content_type: str = JSON_TYPE) -> None:
        """Finish with an answer encoded off the loop."""
        self.finish(body, set_content_type=content_type)


class V1InferRoute(KServeRoute):
    """`POST v1/models/{m}:predict` and `:explain`."""

    @allow(EXECUTE)
    async def post(self, name: str, action: str) -> None:
        explain = action == "explain"
        if self.enveloped_by_worker(name):
            await self.pass_through(name, explain)
            return
        served, limits = self.reach(name)
        items = await DECODES.run(v1_items, self.request.body, limits)
        if items is None:
            await self.pass_through(name, explain)
            return
        bodies = await self.run_items(served, items.rows, explain)
        if bodies is not None:
            key = "explanations" if explain else "predictions"
            self.finish_encoded(await DECODES.run(v1_answer, bodies, key))


class V2InferRoute(KServeRoute):
    """`POST v2/models/{m}[/versions/{v}]/infer` and `/explain` (a version named in the path is
    served, as KServe and Triton serve it; TorchServe 0.12 answers those paths 501)."""

    @allow(EXECUTE)
    async def post(self, name: str, *version_and_action: str) -> None:
        *version, action = version_and_action
        self.version = version[0] if version else None
        explain = action == "explain"
        if self.enveloped_by_worker(name):
            await self.pass_through(name, explain)
            return
        served, limits = self.reach(name)
        header_length = self.request.headers.get(BINARY_HEADER)
        items = await DECODES.run(v2_items, self.request.body, header_length, limits)
        if items is None:
            await self.pass_through(name, explain)
            return
        bodies = await self.run_items(served, items.rows, explain)
        if bodies is not None:
            await self.answer(served, bodies, items)

    async def answer(self, served: Served, bodies: list[bytes], items: Items) -> None:
        """The v2 answer as JSON, or with the outputs the request asked for as binary data."""
        spec = served.model.spec
        model = (spec.model_name, spec.version)
        body, header_length = await DECODES.run(v2_answer, bodies, items, model, self.request_id)
        if header_length is None:
            self.finish_encoded(body)
            return
        self.set_header(BINARY_HEADER, str(header_length))
        self.finish_encoded(body, BINARY_TYPE)


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
