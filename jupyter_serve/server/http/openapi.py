"""The OpenAPI 3.0.1 description of every jupyter_serve route, and the routes that serve it.

`api_description()` builds the document: paths are relative to the serve
prefix, which its `servers` entry names (`{base_url}serve`, e.g. `/user/NAME/serve`
under JupyterHub), so OpenAPI tools resolve `/predictions/demo` under the prefix and
not at the host's root; operation ids and parameter names are TorchServe 0.12's where it has
the route (`ping`, `predictions`, `listModels`, `registerModel`, ...).
`GET api-description` and `OPTIONS` on the prefix root answer it;
`OPTIONS predictions/{m}[/{v}]` answers `model_api(model)`, the per-model
description TorchServe derives from a model. The document says what the server does:
each parameter's schema is what the server enforces, each operation lists every status
it answers (`openapi_parts` builds them), and a schemathesis run over it passes
(tests/test_routes_openapi.py).
"""

from __future__ import annotations

from typing import Any

from jupyter_serve._version import __version__
from jupyter_serve.server.http.access import READ, allow
from jupyter_serve.server.http.base import ServeRoute
from jupyter_serve.server.http.openapi_parts import (
    ARCHIVE,
    CHAT_BODY,
    COMPLETION_BODY,
    KEY_PARAMS,
    LIST_OK,
    METRICS_OK,
    MODEL,
    MODEL_VERSION,
    REGISTER_PARAMS,
    SCALE_PARAMS,
    inference,
    openai_operation,
    operation,
    predict,
    unsupported,
)
from jupyter_serve.server.registry import Model


def _paths(max_workers: int | None = None) -> dict[str, dict[str, Any]]:
    """Every path; `max_workers` is the server's `max_workers_per_model` (more is a 400)."""
    most = max_workers
    describe = ("api-description", "The OpenAPI 3.0.1 description of every API.")
    return {
        "/": {"options": operation("rootApiDescription", describe[1])},
        "/api-description": {"get": operation("apiDescription", describe[1])},
        "/ping": {"get": operation("ping", "Health of the server: Healthy or Unhealthy (500).")},
        "/predictions/{model_name}": predict(
            "predictions", "Predict with the default version.", MODEL
        ),
        "/predictions/{model_name}/{model_version}": predict(
            "version_predictions", "Predict with a version.", MODEL_VERSION
        ),
        "/predictions/{model_name}/{model_version}/{url_path}": predict(
            "url_path_predictions",
            "Predict; extra segments become the url_path header.",
            (*MODEL_VERSION, "url_path"),
        ),
        "/explanations/{model_name}": predict("explanations", "Explain a prediction.", MODEL),
        "/explanations/{model_name}/{model_version}": predict(
            "version_explanations", "Explain a prediction of a version.", MODEL_VERSION
        ),
        "/invocations": predict(
            "invocations",
            "SageMaker-style prediction; query args reach the handler.",
            ("model_name@query",),
        ),
        "/models/{model_name}/invoke": predict(
            "invoke", "SageMaker-style prediction; query args reach the handler.", MODEL
        ),
        "/{model_name}/predict": predict(
            "legacyPredict", "Legacy MMS prediction; query args reach the handler.", MODEL
        ),
        "/{model_name}/{model_version}/predict": predict(
            "legacyVersionPredict", "Legacy MMS prediction of a version.", MODEL_VERSION
        ),
        "/v1/models/{model_name}:predict": {
            "post": inference("kserveV1Predict", "KServe v1: {instances} in, {predictions} out.")
        },
        "/v1/models/{model_name}:explain": {
            "post": inference("kserveV1Explain", "KServe v1: {instances} in, {explanations} out.")
        },
        "/v1/models/{model_name}": {
            "get": operation("kserveV1ModelReady", "{name, ready}.", MODEL)
        },
        "/v1/models": {"get": openai_operation("openaiModels", "OpenAI: the language models.")},
        "/v1/completions": {
            "post": openai_operation("openaiCompletions", "OpenAI completions.", COMPLETION_BODY)
        },
        "/v1/chat/completions": {
            "post": openai_operation("openaiChatCompletions", "OpenAI chat.", CHAT_BODY)
        },
        "/v2": {"get": operation("serverMetadata", "Open Inference Protocol server metadata.")},
        "/v2/health/live": {"get": operation("serverLive", "Open Inference Protocol liveness.")},
        "/v2/health/ready": {"get": operation("serverReady", "Open Inference Protocol readiness.")},
        "/v2/models/{model_name}": {
            "get": operation("modelMetadata", "OIP model metadata.", MODEL)
        },
        "/v2/models/{model_name}/ready": {
            "get": operation("modelReady", "OIP model readiness.", MODEL)
        },
        "/v2/models/{model_name}/infer": {
            "post": inference(
                "modelInfer",
                "Open Inference Protocol inference (JSON, or the binary tensor extension).",
            )
        },
        "/v2/models/{model_name}/explain": {
            "post": inference("modelExplain", "Open Inference Protocol explanation.")
        },
        "/v2/models/{model_name}/versions/{model_version}/infer": {
            "post": inference(
                "versionModelInfer",
                "OIP inference of a version (TorchServe 0.12: 501; KServe and Triton serve it).",
                MODEL_VERSION,
            )
        },
        "/v2/models/{model_name}/versions/{model_version}/explain": {
            "post": inference("versionModelExplain", "OIP explanation of a version.", MODEL_VERSION)
        },
        "/v2/models/{model_name}/versions/{model_version}/{url_path}": {
            method: unsupported(f"versionedModel_{method}")
            for method in ("get", "post", "put", "delete")
        },
        "/metrics": {
            "get": operation("metrics", "Prometheus metrics.", ("name[]", "format"), ok=METRICS_OK)
        },
        "/summary": {
            "get": operation(
                "summary",
                "Every model version with its workers, queue and live figures in one answer "
                "(what the JupyterLab Serving panel shows; see server/http/summary.py).",
            )
        },
        "/logs/{model_name}": {
            "get": operation("modelLogs", "Recent worker output.", (*MODEL, "lines"))
        },
        "/logs/{model_name}/{model_version}": {
            "get": operation(
                "versionModelLogs", "Recent worker output of a version.", (*MODEL_VERSION, "lines")
            )
        },
        "/models": {
            "get": operation("listModels", "List registered models.", ("limit", "next_page_token")),
            "post": operation(
                "registerModel",
                "Register a new model.",
                REGISTER_PARAMS,
                codes=(200, 202),
                errors=(409, 507),
                max_workers=most,
            ),
        },
        "/models/{model_name}": {
            "get": operation(
                "describeModel",
                "Describe the default version.",
                (*MODEL, "customized"),
                ok=LIST_OK,
                errors=(503,),
            ),
            "put": operation(
                "setAutoScale",
                "Scale the default version's workers.",
                (*MODEL, *SCALE_PARAMS),
                codes=(200, 202, 206),
                errors=(507,),
                max_workers=most,
            ),
            "delete": operation(
                "unregisterModel", "Unregister the default version.", MODEL, errors=(408,)
            ),
            "options": operation("modelManagementApi", "This model's management API.", MODEL),
        },
        "/models/{model_name}/{model_version}": {
            "get": operation(
                "versionDescribeModel",
                "Describe a version, or all.",
                (*MODEL_VERSION, "customized"),
                ok=LIST_OK,
                errors=(503,),
            ),
            "put": operation(
                "versionSetAutoScale",
                "Scale a version's workers.",
                (*MODEL_VERSION, *SCALE_PARAMS),
                codes=(200, 202, 206),
                errors=(507,),
                max_workers=most,
            ),
            "delete": operation(
                "versionUnregisterModel", "Unregister a version.", MODEL_VERSION, errors=(408,)
            ),
        },
        "/models/{model_name}/{model_version}/set-default": {
            "put": operation("setDefault", "Make a version the default.", MODEL_VERSION)
        },
        "/models/{model_name}/{model_version}/archive": {
            "get": operation(
                "modelArchive",
                "Download the .mar the version serves from (registered, or packed from its "
                "folder); needs write.",
                MODEL_VERSION,
                ok={"description": "The archive.", "content": ARCHIVE},
            )
        },
        "/keys": {
            "get": operation("listKeys", "List the inference keys (never their secrets)."),
            "post": operation("createKey", "Mint a key (its secret is shown once).", KEY_PARAMS),
        },
        "/keys/{key_id}": {
            "delete": operation("revokeKey", "Revoke an inference key.", ("key_id",))
        },
        "/model-store/{file_name}": {
            "put": operation(
                "uploadArchive",
                "Save the body (an archive) in the model store; 201 new, 409 taken.",
                ("file_name", "overwrite"),
                requestBody={"description": "The archive.", "content": ARCHIVE},
                codes=(200, 201),
                errors=(409,),
            )
        },
    }


def api_description(max_workers: int | None = None, base_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.0.1 document of every route under the serve prefix (`max_workers`: the
    server's `max_workers_per_model`, the most workers a register or scale may ask for;
    `base_url`: the Jupyter server's, which the prefix is under)."""
    return {
        "openapi": "3.0.1",
        "info": {
            "title": "jupyter_serve APIs (TorchServe-compatible)",
            "description": "Serve PyTorch models from the Jupyter server.",
            "version": __version__,
        },
        "servers": servers(base_url),
        "paths": _paths(max_workers),
    }


def servers(base_url: str) -> list[dict[str, str]]:
    """The document's `servers`: the serve prefix under the Jupyter server's `base_url`, a
    path on the host the document was fetched from (OpenAPI 3 resolves it there)."""
    prefix = "/" + base_url.strip("/") + "/" if base_url.strip("/") else "/"
    return [{"url": f"{prefix}serve", "description": "This Jupyter server's serve prefix."}]


def model_api(model: Model, base_url: str = "/") -> dict[str, Any]:
    """One model version's description (`OPTIONS predictions/{m}[/{v}]`), its paths under
    the serve prefix of `base_url` (`servers`)."""
    name = model.spec.model_name
    what = f"A prediction entry point for model: {name}."
    return {
        "openapi": "3.0.1",
        "info": {"title": f"RESTful API for: {name}", "version": model.spec.version},
        "servers": servers(base_url),
        "paths": {f"/predictions/{name}": predict("predictions", what, MODEL)},
    }


def model_management_api(model: Model, base_url: str = "/") -> dict[str, Any]:
    """One model version's management description (`OPTIONS models/{m}[/{v}]`), its paths
    under the serve prefix of `base_url` (`servers`)."""
    name = model.spec.model_name
    paths = _paths()
    return {
        "openapi": "3.0.1",
        "info": {"title": f"Management RESTful API for: {name}", "version": model.spec.version},
        "servers": servers(base_url),
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
    """The document of the route's server (its `max_workers_per_model` bounds worker counts,
    its `base_url` is in `servers`)."""
    workers = int(route.settings["serve_app"].max_workers_per_model)
    return api_description(workers, str(route.base_url))


class RootRoute(ServeRoute):
    """`OPTIONS` on the prefix root: the description; GET is 405, as in TorchServe."""

    @allow(READ)
    def options_document(self) -> None:
        self.write_json(served_description(self))


ROUTES: list[tuple[str, type[Any]]] = [
    (r"api-description", ApiDescriptionRoute),
    (r"/?", RootRoute),
]
