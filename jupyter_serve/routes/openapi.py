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

_ERROR_BODY = {
    "application/json": {
        "schema": {
            "type": "object",
            "required": ["code", "type", "message"],
            "properties": {
                "code": {"type": "integer", "description": "Error code."},
                "type": {"type": "string", "description": "Error type."},
                "message": {"type": "string", "description": "Error message."},
                "cause": {"type": "string", "description": "Why, when the server knows."},
            },
        }
    }
}
_ERROR = {"description": "Error", "content": _ERROR_BODY}
_NOT_ALLOWED = {
    "description": "Method not allowed (or the model API is off)",
    "headers": {"Allow": {"description": "The methods the path answers.",
                          "schema": {"type": "string"}}},
    "content": _ERROR_BODY,
}  # fmt: skip
_VERSIONING = {
    "description": "Not implemented",
    "content": {
        "application/json": {
            "schema": {"type": "object", "required": ["error"],
                       "properties": {"error": {"type": "string"}}},
        }
    },
}  # fmt: skip
_STATUS_OK = {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}
_JSON_OK = _STATUS_OK
_LIST_OK = {"description": "OK", "content": {"application/json": {"schema": {"type": "array"}}}}
_BINARY = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
_ARCHIVE = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
_BODY = {"description": "Input data format is defined by each model.", "content": _BINARY}
_METRICS_OK = {
    "description": "Prometheus text (version 0.0.4); with format=json, the dashboard's figures.",
    "content": {
        "text/plain": {"schema": {"type": "string"}},
        "application/json": {"schema": {"type": "object"}},
    },
}
# Every route may answer these: a malformed request, Jupyter refusing the credentials, no such
# resource, a method the path does not have (with Allow), a body over max_request_size, a bug.
_ALWAYS = (400, 403, 404, 405, 413, 500)
_NAME_RULE = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_\-.]*$", "maxLength": 128}
_PARAMS: dict[str, tuple[str, dict[str, Any], str]] = {
    # name: (where, schema, description)
    "model_name": ("path", {"type": "string"}, "Name of model."),
    "model_version": ("path", {"type": "string"}, "Version of model."),
    "url_path": ("path", {"type": "string"}, "Extra path segments, passed as url_path."),
    "url": ("query", {"type": "string", "minLength": 1},
            "Model archive url: a .mar (or folder) in the model store, or an allowed http(s) url."),
    "model_name@register": ("query", _NAME_RULE, "Name of model (default: the manifest's)."),
    "handler": ("query", {"type": "string", "minLength": 1},
                "Inference handler entry-point (overrides the manifest)."),
    "runtime": ("query", {"type": "string", "enum": ["python", "python3", "LSP"]},
                "Runtime for the model."),
    "batch_size": ("query", {"type": "integer", "minimum": 1}, "Inference batch size, default: 1."),
    "max_batch_delay": ("query", {"type": "integer", "minimum": 0},
                        "Maximum delay for batch aggregation (ms)."),
    "initial_workers": ("query", {"type": "integer", "minimum": 0},
                        "Number of initial workers, default: 0."),
    "synchronous": ("query", {"type": "boolean"}, "Wait for the workers before answering."),
    "response_timeout": ("query", {"type": "integer"},
                         "Seconds to wait for a worker's answer (0 or less: the default)."),
    "startup_timeout": ("query", {"type": "integer"},
                        "Seconds to wait for a worker to load (below 0: the default)."),
    "min_worker": ("query", {"type": "integer", "minimum": 0}, "Minimum number of workers."),
    "max_worker": ("query", {"type": "integer", "minimum": 0},
                   "Maximum number of workers (not below min_worker: 400)."),
    "number_gpu": ("query", {"type": "integer"}, "Number of GPU workers (ignored, as in 0.12)."),
    "timeout": ("query", {"type": "integer"}, "Seconds to wait (ignored, as in TorchServe 0.12)."),
    "limit": ("query", {"type": "integer"}, "Models per page, default: 100."),
    "next_page_token": ("query", {"type": "integer"}, "The token of the page to return."),
    "customized": ("query", {"type": "boolean"}, "Include the handler's describe_handle()."),
    "name[]": ("query", {"type": "string"}, "Names of the metrics to return (repeatable)."),
    "format": ("query", {"type": "string"},
               "`json`: the dashboard's figures instead of Prometheus text."),
    "lines": ("query", {"type": "integer"}, "How many of the newest output lines to return."),
    "model_name@query": ("query", {"type": "string", "minLength": 1},
                         "Name of model; may be left out when exactly one model was loaded at "
                         "startup (else 400)."),
    "name": ("query", {"type": "string"}, "A label for the new inference key."),
    "models": ("query", {"type": "string"}, "Models the key may run, comma-separated."),
    "key_id": ("path", {"type": "string"}, "Id of an inference key."),
    "file_name": ("path", {"type": "string", "pattern": r"^[^/\\.][^/\\]*\.(mar|tar\.gz|tgz|zip)$"},
                  "Archive file name: .mar, .tar.gz, .tgz or .zip."),
    "overwrite": ("query", {"type": "boolean"}, "Replace an archive of that name (else 409)."),
}  # fmt: skip
"""Keys are parameter names; `name@where` tells two parameters of one name apart."""
_REQUIRED = {"url"}


def _parameter(name: str, max_workers: int | None) -> dict[str, Any]:
    where, schema, description = _PARAMS[name]
    if max_workers is not None and name in ("initial_workers", "min_worker", "max_worker"):
        schema = {**schema, "maximum": max_workers}
    return {
        "in": where,
        "name": name.split("@", 1)[0],
        "description": description,
        "required": (where == "path" and name != "url_path") or name in _REQUIRED,
        "schema": schema,
    }


def _op(
    operation_id: str,
    description: str,
    params: tuple[str, ...] = (),
    *,
    ok: dict[str, Any] = _STATUS_OK,
    codes: tuple[int, ...] = (200,),
    errors: tuple[int, ...] = (),
    max_workers: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One operation: its parameters, `ok` for its success `codes`, TorchServe's error JSON for
    `_ALWAYS` and its own `errors`; `max_workers` bounds the worker counts."""
    responses: dict[str, Any] = {str(code): ok for code in codes}
    for code in sorted({*_ALWAYS, *errors}):
        responses[str(code)] = _NOT_ALLOWED if code == 405 else _ERROR
    responses.update(extra.pop("responses", {}))
    return {
        "description": description,
        "operationId": operation_id,
        "parameters": [_parameter(name, max_workers) for name in params],
        **extra,
        "responses": responses,
    }


_M = ("model_name",)
_MV = ("model_name", "model_version")
_PREDICT_OK = {"description": "Output data format is defined by each model.", "content": _BINARY}
_HANDLER_STATUS = {
    "default": {
        "description": "Any status the handler sets (context.set_response_status, "
        "PredictionException's code), with its own body.",
        "content": _BINARY,
    }
}
_REGISTER: tuple[str, ...] = ("url", "model_name@register", "handler", "runtime", "batch_size")
_REGISTER += ("max_batch_delay", "initial_workers", "synchronous", "response_timeout")
_REGISTER += ("startup_timeout",)
_KEY = ("name", "models")
_SCALE = ("min_worker", "max_worker", "number_gpu", "synchronous", "timeout")
_INFERENCE_ERRORS = (503, 507)  # no worker or a full queue; out of memory


def _predict(op_id: str, what: str, params: tuple[str, ...]) -> dict[str, Any]:
    """A prediction path: POST (and, as in TorchServe, GET, PUT, DELETE and PATCH too, which
    `curl -T` uses) runs the handler; OPTIONS describes it."""
    methods = {
        method: _inference(
            op_id if method == "post" else f"{op_id}_{method}",
            what,
            params,
            body=method in ("post", "put", "patch"),
        )
        for method in ("post", "get", "put", "delete", "patch")
    }
    methods["options"] = _op(f"{op_id}Api", "Display details of per model input and output.",
                             params)  # fmt: skip
    return methods


def _inference(
    op_id: str, what: str, params: tuple[str, ...] = _M, *, body: bool = True
) -> dict[str, Any]:
    """An inference operation: any body in, the handler's answer (and statuses) out."""
    extra: dict[str, Any] = {"requestBody": _BODY} if body else {}
    return _op(op_id, what, params, ok=_PREDICT_OK, errors=_INFERENCE_ERRORS,
               responses=_HANDLER_STATUS, **extra)  # fmt: skip


def _unsupported(op_id: str) -> dict[str, Any]:
    """`v2/models/{m}/versions/...`: TorchServe 0.12's 501 {"error": ...} for every method."""
    return _op(op_id, "Other versioned v2 paths: 501, as in TorchServe 0.12.",
               (*_MV, "url_path"), responses={"501": _VERSIONING})  # fmt: skip


def _paths(max_workers: int | None = None) -> dict[str, dict[str, Any]]:
    """Every path; `max_workers` is the server's `max_workers_per_model` (more is a 400)."""
    most = max_workers
    describe = ("api-description", "The OpenAPI 3.0.1 description of every API.")
    return {
        "/": {"options": _op("rootApiDescription", describe[1])},
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
            "post": _inference("kserveV1Predict", "KServe v1: {instances} in, {predictions} out.")
        },
        "/v1/models/{model_name}:explain": {
            "post": _inference("kserveV1Explain", "KServe v1: {instances} in, {explanations} out.")
        },
        "/v1/models/{model_name}": {"get": _op("kserveV1ModelReady", "{name, ready}.", _M)},
        "/v2": {"get": _op("serverMetadata", "Open Inference Protocol server metadata.")},
        "/v2/health/live": {"get": _op("serverLive", "Open Inference Protocol liveness.")},
        "/v2/health/ready": {"get": _op("serverReady", "Open Inference Protocol readiness.")},
        "/v2/models/{model_name}": {"get": _op("modelMetadata", "OIP model metadata.", _M)},
        "/v2/models/{model_name}/ready": {"get": _op("modelReady", "OIP model readiness.", _M)},
        "/v2/models/{model_name}/infer": {
            "post": _inference(
                "modelInfer",
                "Open Inference Protocol inference (JSON, or the binary tensor extension).",
            )
        },
        "/v2/models/{model_name}/explain": {
            "post": _inference("modelExplain", "Open Inference Protocol explanation.")
        },
        "/v2/models/{model_name}/versions/{model_version}/infer": {
            "post": _inference(
                "versionModelInfer",
                "OIP inference of a version (TorchServe 0.12: 501; KServe and Triton serve it).",
                _MV,
            )
        },
        "/v2/models/{model_name}/versions/{model_version}/explain": {
            "post": _inference("versionModelExplain", "OIP explanation of a version.", _MV)
        },
        "/v2/models/{model_name}/versions/{model_version}/{url_path}": {
            method: _unsupported(f"versionedModel_{method}")
            for method in ("get", "post", "put", "delete")
        },
        "/metrics": {
            "get": _op("metrics", "Prometheus metrics.", ("name[]", "format"), ok=_METRICS_OK)
        },
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
            "post": _op(
                "registerModel",
                "Register a new model.",
                _REGISTER,
                codes=(200, 202),
                errors=(409, 507),
                max_workers=most,
            ),
        },
        "/models/{model_name}": {
            "get": _op(
                "describeModel",
                "Describe the default version.",
                (*_M, "customized"),
                ok=_LIST_OK,
                errors=(503,),
            ),
            "put": _op(
                "setAutoScale",
                "Scale the default version's workers.",
                (*_M, *_SCALE),
                codes=(200, 202, 206),
                errors=(507,),
                max_workers=most,
            ),
            "delete": _op("unregisterModel", "Unregister the default version.", _M, errors=(408,)),
            "options": _op("modelManagementApi", "This model's management API.", _M),
        },
        "/models/{model_name}/{model_version}": {
            "get": _op(
                "versionDescribeModel",
                "Describe a version, or all.",
                (*_MV, "customized"),
                ok=_LIST_OK,
                errors=(503,),
            ),
            "put": _op(
                "versionSetAutoScale",
                "Scale a version's workers.",
                (*_MV, *_SCALE),
                codes=(200, 202, 206),
                errors=(507,),
                max_workers=most,
            ),
            "delete": _op("versionUnregisterModel", "Unregister a version.", _MV, errors=(408,)),
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
                codes=(200, 201),
                errors=(409,),
            )
        },
    }


def api_description(max_workers: int | None = None) -> dict[str, Any]:
    """The OpenAPI 3.0.1 document of every route under the serve prefix (`max_workers`: the
    server's `max_workers_per_model`, the most workers a register or scale may ask for)."""
    return {
        "openapi": "3.0.1",
        "info": {
            "title": "jupyter_serve APIs (TorchServe-compatible)",
            "description": "Serve PyTorch models from the Jupyter server.",
            "version": __version__,
        },
        "paths": _paths(max_workers),
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
        self.write_json(served_description(self))

    options_document = get


def served_description(route: ServeRoute) -> dict[str, Any]:
    """The document of the route's server (its `max_workers_per_model` bounds worker counts)."""
    return api_description(int(route.settings["serve_app"].max_workers_per_model))


class RootRoute(ServeRoute):
    """`OPTIONS` on the prefix root: the description; GET is 405, as in TorchServe."""

    @allow(READ)
    def options_document(self) -> None:
        self.write_json(served_description(self))


ROUTES: list[tuple[str, type[Any]]] = [
    (r"api-description", ApiDescriptionRoute),
    (r"/?", RootRoute),
]
