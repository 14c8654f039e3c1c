"""TorchServe's other prediction routes: SageMaker-style and legacy MMS paths.

TorchServe 0.12 still answers these on its inference port, and clients written
for SageMaker or for MMS 0.4 call them:

* ``invocations?model_name=M``: the model from the query, else the one model
  loaded at startup when there is exactly one, else a ``model_name`` form field;
  with none of them, 400 "Parameter model_name is required.";
* ``models/{m}/invoke``: the default version of ``m``;
* ``{m}/predict`` and ``{m}/{v}/predict``: the legacy MMS routes.

Unlike ``predictions/``, these forward the query string's arguments to the
handler as request parameters (before the body's), as TorchServe does, except
Jupyter's credentials ``token`` and ``_xsrf`` (`requests.handler_arguments`). They share
everything else (413, 404, 503, batching, metrics, OPTIONS answering the model's
OpenAPI description) with `PredictionRoute`.
"""

from __future__ import annotations

from typing import Any

from jupyter_serve.server.http.access import EXECUTE, READ, allow
from jupyter_serve.server.http.exchange import Job
from jupyter_serve.server.http.inference import PredictionRoute
from jupyter_serve.server.http.openapi import model_api
from jupyter_serve.server.http.requests import handler_arguments, to_inference_request
from jupyter_serve.wire.errors import BadRequest
from jupyter_serve.wire.protocol import InferenceRequest, Parameter

MODEL_NAME_REQUIRED = "Parameter model_name is required."


class AliasPredictionRoute(PredictionRoute):
    """A prediction route whose query arguments become handler parameters."""

    def query_parameters(self) -> list[Parameter]:
        """Every query argument as a parameter without content type (TorchServe's order),
        but Jupyter's credentials (`?token=`, `?_xsrf=`), which no handler may see."""
        return [
            Parameter(name, "", value)
            for name, values in handler_arguments(self.request.query_arguments).items()
            for value in values
        ]

    def model_name(self, request: InferenceRequest, path_name: str | None) -> str:
        """The model the path names (`invocations` overrides this)."""
        return path_name or ""

    def alias_job(self, name: str | None, version: str | None) -> Job:
        """The request with the query's parameters first, and the model it names."""
        request = to_inference_request(self.request, self.request_id)
        request = InferenceRequest(
            request.request_id, request.headers, (*self.query_parameters(), *request.parameters)
        )
        return Job(self.model_name(request, name), version, request)

    @allow(EXECUTE)
    async def _predict(self, name: str | None = None, version: str | None = None) -> None:
        await self.respond(lambda: self.alias_job(name, version))

    get = post = put = delete = patch = _predict

    @allow(READ)
    def options_document(
        self, name: str | None = None, version: str | None = None, *_: Any
    ) -> None:
        request = InferenceRequest(self.request_id, {}, tuple(self.query_parameters()))
        model = self.registry.get(self.model_name(request, name), version)
        self.write_json(model_api(model, str(self.base_url)))


class InvocationsRoute(AliasPredictionRoute):
    """`invocations[?model_name=M]`: SageMaker's single entry point."""

    def model_name(self, request: InferenceRequest, path_name: str | None) -> str:
        name = self.get_query_argument("model_name", "")
        if not name:
            name = self.registry.only_startup_model() or ""
        if not name:
            name = _string_parameter(request, "model_name")
        if not name:
            raise BadRequest(MODEL_NAME_REQUIRED)
        return name


def _string_parameter(request: InferenceRequest, key: str) -> str:
    """The last parameter named `key`, as text ("" when absent)."""
    values = [param.value for param in request.parameters if param.name == key]
    return bytes(values[-1]).decode("utf-8", "replace") if values else ""


ROUTES: list[tuple[str, type[Any]]] = [
    (r"invocations/?", InvocationsRoute),
    (r"models/([^/]+)/invoke/?", AliasPredictionRoute),
]
"""Matched before the management routes (`models/{m}/invoke` is not a version)."""

LEGACY_ROUTES: list[tuple[str, type[Any]]] = [
    (r"([^/]+)/predict/?", AliasPredictionRoute),
    (r"([^/]+)/([^/]+)/predict/?", AliasPredictionRoute),
]
"""Matched after every other route, just before the 404 catch-all."""
