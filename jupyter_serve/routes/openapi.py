"""The OpenAPI 3.0.1 description of every jupyter_serve route, and the routes that serve it.

`api_description()` builds the document: paths are relative to the serve
prefix; operation ids and parameter names are TorchServe 0.12's where it has
the route (`ping`, `predictions`, `listModels`, `registerModel`, ...).
`GET api-description` and `OPTIONS` on the prefix root answer it;
`OPTIONS predictions/{m}[/{v}]` answers `model_api(model)`, the per-model
description TorchServe derives from a model.
"""

from __future__ import annotations

from typing import Any

from .._version import __version__
from ..registry import Model
from .access import READ, allow
from .base import ServeRoute

_ERROR = {
    "description": "Error",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["code", "type", "message"],
                "properties": {
                    "code": {"type": "integer", "description": "Error code."},
                    "type": {"type": "string", "description": "Error type."},
                    "message": {"type": "string", "description": "Error message."},
                },
            }
        }
    },
}
_JSON_OK = {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}
_BINARY = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
_ARCHIVE = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
_BODY = {"description": "Input data format is defined by each model.", "content": _BINARY}
_PARAMS: dict[str, tuple[str, str, str]] = {
    # name: (where, type, description)
    "model_name": ("path", "string", "Name of model."),
    "model_version": ("path", "string", "Version of model."),
    "url_path": ("path", "string", "Extra path segments, passed to the handler as url_path."),
    "url": ("query", "string", "Model archive download url (a .mar in the model store)."),
    "handler": ("query", "string", "Inference handler entry-point (overrides the manifest)."),
    "runtime": ("query", "string", "Runtime for the model: python, python3."),
    "batch_size": ("query", "integer", "Inference batch size, default: 1."),
    "max_batch_delay": ("query", "integer", "Maximum delay for batch aggregation (ms)."),
    "initial_workers": ("query", "integer", "Number of initial workers, default: 0."),
    "synchronous": ("query", "boolean", "Wait for the workers before answering."),
    "response_timeout": ("query", "integer", "Seconds to wait for a worker's answer."),
    "startup_timeout": ("query", "integer", "Seconds to wait for a worker to load."),
    "min_worker": ("query", "integer", "Minimum number of worker processes."),
    "max_worker": ("query", "integer", "Maximum number of worker processes."),
    "number_gpu": ("query", "integer", "Number of GPU worker processes (ignored, as in 0.12)."),
    "timeout": ("query", "integer", "Seconds to wait (ignored, as in TorchServe 0.12)."),
    "limit": ("query", "integer", "Models per page, default: 100."),
    "next_page_token": ("query", "string", "The token of the page to return."),
    "customized": ("query", "boolean", "Include the handler's describe_handle() output."),
    "name[]": ("query", "string", "Names of the metrics to return (repeatable)."),
    "format": ("query", "string", "`json`: the dashboard's figures instead of Prometheus text."),
    "lines": ("query", "integer", "How many of the newest output lines to return."),
    "model_name@query": ("query", "string", "Name of model (else the one startup model)."),
    "name": ("query", "string", "A label for the new inference key."),
    "models": ("query", "string", "Models the key may run, comma-separated (default: all)."),
    "key_id": ("path", "string", "Id of an inference key."),
    "file_name": ("path", "string", "Archive file name: .mar, .tar.gz, .tgz or .zip."),
    "overwrite": ("query", "boolean", "Replace an archive of that name (else 409)."),
}
"""Keys are parameter names; `name@where` tells two parameters of one name apart."""


def _op(operation_id: str, description: str, params: tuple[str, ...] = (), **extra: Any) -> Any:
    parameters = [
        {
            "in": _PARAMS[name][0],
            "name": name.split("@", 1)[0],
            "description": _PARAMS[name][2],
            "required": _PARAMS[name][0] == "path" and name != "url_path",
            "schema": {"type": _PARAMS[name][1]},
        }
        for name in params
    ]
    responses = {"200": extra.pop("ok", _JSON_OK), "404": _ERROR, "500": _ERROR}
    return {
        "description": description,
        "operationId": operation_id,
        "parameters": parameters,
        **extra,
        "responses": responses,
    }


_M = ("model_name",)
_MV = ("model_name", "model_version")
_PREDICT_OK = {"description": "Output data format is defined by each model.", "content": _BINARY}
_REGISTER: tuple[str, ...] = ("url", "model_name", "handler", "runtime", "batch_size")
_REGISTER += ("max_batch_delay", "initial_workers", "synchronous", "response_timeout")
_REGISTER += ("startup_timeout",)
_KEY = ("name", "models")
_SCALE = ("min_worker", "max_worker", "number_gpu", "synchronous", "timeout")


def _predict(op_id: str, what: str, params: tuple[str, ...]) -> dict[str, Any]:
    return {
        "post": _op(op_id, what, params, requestBody=_BODY, ok=_PREDICT_OK),
        "options": _op(f"{op_id}Api", "Display details of per model input and output.", params),
    }


def _paths() -> dict[str, dict[str, Any]]:
    describe = ("api-description", "The OpenAPI 3.0.1 description of every API.")
    return {
        "/": {"options": _op("apiDescription", describe[1])},
        "/api-description": {"get": _op("apiDescription", describe[1])},
        "/ping": {"get": _op("ping", "Health of the server: Healthy or Unhealthy (500).")},
        "/predictions/{model_name}": _predict(
            "predictions", "Predict with the default version.", _M
        ),
        "/predictions/{model_name}/{model_version}": _predict(
            "version_predictions", "Predict with a version.", _MV
        ),
        "/predictions/{model_name}/{model_version}/{url_path}": _predict(
            "url_path_predictions",
            "Predict; extra segments become the url_path header.",
            (*_MV, "url_path"),
        ),
        "/explanations/{model_name}": _predict("explanations", "Explain a prediction.", _M),
        "/explanations/{model_name}/{model_version}": _predict(
            "version_explanations", "Explain a prediction of a version.", _MV
        ),
        "/invocations": _predict(
            "invocations",
            "SageMaker-style prediction; query args reach the handler.",
            ("model_name@query",),
        ),
        "/models/{model_name}/invoke": _predict(
            "invoke", "SageMaker-style prediction; query args reach the handler.", _M
        ),
        "/{model_name}/predict": _predict(
            "legacyPredict", "Legacy MMS prediction; query args reach the handler.", _M
        ),
        "/{model_name}/{model_version}/predict": _predict(
            "legacyVersionPredict", "Legacy MMS prediction of a version.", _MV
        ),
        "/v1/models/{model_name}:predict": {
            "post": _op("kserveV1Predict", "KServe v1: {instances} in, {predictions} out.", _M)
        },
        "/v1/models/{model_name}:explain": {
            "post": _op("kserveV1Explain", "KServe v1: {instances} in, {explanations} out.", _M)
        },
        "/v1/models/{model_name}": {"get": _op("kserveV1ModelReady", "{name, ready}.", _M)},
        "/v2": {"get": _op("serverMetadata", "Open Inference Protocol server metadata.")},
        "/v2/health/live": {"get": _op("serverLive", "Open Inference Protocol liveness.")},
        "/v2/health/ready": {"get": _op("serverReady", "Open Inference Protocol readiness.")},
        "/v2/models/{model_name}": {"get": _op("modelMetadata", "OIP model metadata.", _M)},
        "/v2/models/{model_name}/ready": {"get": _op("modelReady", "OIP model readiness.", _M)},
        "/v2/models/{model_name}/infer": {
            "post": _op("modelInfer", "Open Inference Protocol inference.", _M)
        },
        "/v2/models/{model_name}/explain": {
            "post": _op("modelExplain", "Open Inference Protocol explanation.", _M)
        },
        "/v2/models/{model_name}/versions/{model_version}/{url_path}": {
            "post": _op("versionedModelInfer", "Not supported: 501.", (*_MV, "url_path"))
        },
        "/metrics": {"get": _op("metrics", "Prometheus metrics.", ("name[]", "format"))},
        "/summary": {
            "get": _op(
                "summary",
                "Every model version with its workers, queue and live figures in one answer "
                "(what the JupyterLab Serving panel shows; see routes/summary.py).",
            )
        },
        "/logs/{model_name}": {"get": _op("modelLogs", "Recent worker output.", (*_M, "lines"))},
        "/logs/{model_name}/{model_version}": {
            "get": _op("versionModelLogs", "Recent worker output of a version.", (*_MV, "lines"))
        },
        "/models": {
            "get": _op("listModels", "List registered models.", ("limit", "next_page_token")),
            "post": _op("registerModel", "Register a new model.", _REGISTER),
        },
        "/models/{model_name}": {
            "get": _op("describeModel", "Describe the default version.", (*_M, "customized")),
            "put": _op("setAutoScale", "Scale the default version's workers.", (*_M, *_SCALE)),
            "delete": _op("unregisterModel", "Unregister the default version.", _M),
            "options": _op("modelManagementApi", "This model's management API.", _M),
        },
        "/models/{model_name}/{model_version}": {
            "get": _op("versionDescribeModel", "Describe a version, or all.", (*_MV, "customized")),
            "put": _op("versionSetAutoScale", "Scale a version's workers.", (*_MV, *_SCALE)),
            "delete": _op("versionUnregisterModel", "Unregister a version.", _MV),
        },
        "/models/{model_name}/{model_version}/set-default": {
            "put": _op("setDefault", "Make a version the default.", _MV)
        },
        "/models/{model_name}/{model_version}/archive": {
            "get": _op(
                "modelArchive",
                "Download the .mar the version serves from (registered, or packed from its "
                "folder); needs write.",
                _MV,
                ok={"description": "The archive.", "content": _ARCHIVE},
            )
        },
        "/keys": {
            "get": _op("listKeys", "List the inference keys (never their secrets)."),
            "post": _op("createKey", "Mint a key (its secret is shown once).", _KEY),
        },
        "/keys/{key_id}": {"delete": _op("revokeKey", "Revoke an inference key.", ("key_id",))},
        "/model-store/{file_name}": {
            "put": _op(
                "uploadArchive",
                "Save the body (an archive) in the model store; 201 new, 409 taken.",
                ("file_name", "overwrite"),
                requestBody={"description": "The archive.", "content": _ARCHIVE},
            )
        },
    }


def api_description() -> dict[str, Any]:
    """The OpenAPI 3.0.1 document of every route under the serve prefix."""
    return {
        "openapi": "3.0.1",
        "info": {
            "title": "jupyter_serve APIs (TorchServe-compatible)",
            "description": "Serve PyTorch models from the Jupyter server.",
            "version": __version__,
        },
        "paths": _paths(),
    }


def model_api(model: Model) -> dict[str, Any]:
    """One model version's description (`OPTIONS predictions/{m}[/{v}]`)."""
    name = model.spec.model_name
    what = f"A prediction entry point for model: {name}."
    return {
        "openapi": "3.0.1",
        "info": {"title": f"RESTful API for: {name}", "version": model.spec.version},
        "paths": {f"/predictions/{name}": _predict("predictions", what, _M)},
    }


def model_management_api(model: Model) -> dict[str, Any]:
    """One model version's management description (`OPTIONS models/{m}[/{v}]`)."""
    name = model.spec.model_name
    paths = _paths()
    return {
        "openapi": "3.0.1",
        "info": {"title": f"Management RESTful API for: {name}", "version": model.spec.version},
        "paths": {
            f"/models/{name}": paths["/models/{model_name}"],
            f"/models/{name}/{{model_version}}": paths["/models/{model_name}/{model_version}"],
        },
    }


class ApiDescriptionRoute(ServeRoute):
    """`GET api-description` (and OPTIONS there, as TorchServe)."""

    @allow(READ)
    def get(self) -> None:
        self.write_json(api_description())

    options_document = get


class RootRoute(ServeRoute):
    """`OPTIONS` on the prefix root: the description; GET is 405, as in TorchServe."""

    @allow(READ)
    def options_document(self) -> None:
        self.write_json(api_description())


ROUTES: list[tuple[str, type[Any]]] = [
    (r"api-description", ApiDescriptionRoute),
    (r"/?", RootRoute),
]
