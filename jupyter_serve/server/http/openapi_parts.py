"""The building blocks of the OpenAPI document (`openapi`): parameters, responses, operations.

`PARAMS` lists every query and path parameter with the schema the server enforces;
`operation` builds one operation with TorchServe's error JSON for the statuses every route
may answer (`ALWAYS`) and its own; `predict`, `inference` and `unsupported` build the
prediction, inference and versioned-v2 operations.
"""

from __future__ import annotations

from typing import Any

from jupyter_serve.server.registry.names import name_pattern

ERROR_BODY = {
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
ERROR = {"description": "Error", "content": ERROR_BODY}
NOT_ALLOWED = {
    "description": "Method not allowed (or the model API is off)",
    "headers": {"Allow": {"description": "The methods the path answers.",
                          "schema": {"type": "string"}}},
    "content": ERROR_BODY,
}  # fmt: skip
VERSIONING = {
    "description": "Not implemented",
    "content": {
        "application/json": {
            "schema": {"type": "object", "required": ["error"],
                       "properties": {"error": {"type": "string"}}},
        }
    },
}  # fmt: skip
STATUS_OK = {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}
JSON_OK = STATUS_OK
LIST_OK = {"description": "OK", "content": {"application/json": {"schema": {"type": "array"}}}}
BINARY = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
ARCHIVE = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
BODY = {"description": "Input data format is defined by each model.", "content": BINARY}
METRICS_OK = {
    "description": "Prometheus text (version 0.0.4); with format=json, the dashboard's figures.",
    "content": {
        "text/plain": {"schema": {"type": "string"}},
        "application/json": {"schema": {"type": "object"}},
    },
}
# Every route may answer these: a malformed request, Jupyter refusing the credentials, no such
# resource, a method the path does not have (with Allow), a body over max_request_size, a bug.
ALWAYS = (400, 403, 404, 405, 413, 500)
NAME_RULE = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_\-.]*$", "maxLength": 128}
PARAMS: dict[str, tuple[str, dict[str, Any], str]] = {
    # name: (where, schema, description)
    "model_name": ("path", {"type": "string"}, "Name of model."),
    "model_version": ("path", {"type": "string"}, "Version of model."),
    "url_path": ("path", {"type": "string"}, "Extra path segments, passed as url_path."),
    "url": ("query", {"type": "string", "minLength": 1},  # + `name_pattern` (parameter)
            "Model archive url: a .mar (or folder) in the model store, or an allowed http(s) url."),
    "model_name@register": ("query", NAME_RULE, "Name of model (default: the manifest's)."),
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
    "file_name": ("path", {"type": "string"},  # + `name_pattern` (parameter)
                  "Archive file name: .mar, .tar.gz, .tgz or .zip."),
    "overwrite": ("query", {"type": "boolean"}, "Replace an archive of that name (else 409)."),
}  # fmt: skip
"""Keys are parameter names; `name@where` tells two parameters of one name apart."""
REQUIRED = {"url"}
PATTERNS = {
    "url": lambda: name_pattern(),
    "file_name": lambda: name_pattern(r"\.", r"/\\", r"\.(mar|tar\.gz|tgz|zip)"),
}
"""The names the store rule (server/registry/names.py) takes, made when a document is built."""


def parameter(name: str, max_workers: int | None) -> dict[str, Any]:
    where, schema, description = PARAMS[name]
    if max_workers is not None and name in ("initial_workers", "min_worker", "max_worker"):
        schema = {**schema, "maximum": max_workers}
    if name in PATTERNS:
        schema = {**schema, "pattern": PATTERNS[name]()}
    return {
        "in": where,
        "name": name.split("@", 1)[0],
        "description": description,
        "required": (where == "path" and name != "url_path") or name in REQUIRED,
        "schema": schema,
    }


def operation(
    operation_id: str,
    description: str,
    params: tuple[str, ...] = (),
    *,
    ok: dict[str, Any] = STATUS_OK,
    codes: tuple[int, ...] = (200,),
    errors: tuple[int, ...] = (),
    max_workers: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One operation: its parameters, `ok` for its success `codes`, TorchServe's error JSON for
    `ALWAYS` and its own `errors`; `max_workers` bounds the worker counts."""
    responses: dict[str, Any] = {str(code): ok for code in codes}
    for code in sorted({*ALWAYS, *errors}):
        responses[str(code)] = NOT_ALLOWED if code == 405 else ERROR
    responses.update(extra.pop("responses", {}))
    return {
        "description": description,
        "operationId": operation_id,
        "parameters": [parameter(name, max_workers) for name in params],
        **extra,
        "responses": responses,
    }


MODEL = ("model_name",)
MODEL_VERSION = ("model_name", "model_version")
PREDICT_OK = {"description": "Output data format is defined by each model.", "content": BINARY}
HANDLER_STATUS = {
    "default": {
        "description": "Any status the handler sets (context.set_response_status, "
        "PredictionException's code), with its own body.",
        "content": BINARY,
    }
}
REGISTER_PARAMS: tuple[str, ...] = (
    "url",
    "model_name@register",
    "handler",
    "runtime",
    "batch_size",
)
REGISTER_PARAMS += ("max_batch_delay", "initial_workers", "synchronous", "response_timeout")
REGISTER_PARAMS += ("startup_timeout",)
KEY_PARAMS = ("name", "models")
SCALE_PARAMS = ("min_worker", "max_worker", "number_gpu", "synchronous", "timeout")
INFERENCE_ERRORS = (503, 507)  # no worker or a full queue; out of memory


def predict(op_id: str, what: str, params: tuple[str, ...]) -> dict[str, Any]:
    """A prediction path: POST (and, as in TorchServe, GET, PUT, DELETE and PATCH too, which
    `curl -T` uses) runs the handler; OPTIONS describes it."""
    methods = {
        method: inference(
            op_id if method == "post" else f"{op_id}_{method}",
            what,
            params,
            body=method in ("post", "put", "patch"),
        )
        for method in ("post", "get", "put", "delete", "patch")
    }
    methods["options"] = operation(f"{op_id}Api", "Display details of per model input and output.",
                             params)  # fmt: skip
    return methods


def inference(
    op_id: str, what: str, params: tuple[str, ...] = MODEL, *, body: bool = True
) -> dict[str, Any]:
    """An inference operation: any body in, the handler's answer (and statuses) out."""
    extra: dict[str, Any] = {"requestBody": BODY} if body else {}
    return operation(op_id, what, params, ok=PREDICT_OK, errors=INFERENCE_ERRORS,
               responses=HANDLER_STATUS, **extra)  # fmt: skip


def unsupported(op_id: str) -> dict[str, Any]:
    """`v2/models/{m}/versions/...`: TorchServe 0.12's 501 {"error": ...} for every method."""
    return operation(op_id, "Other versioned v2 paths: 501, as in TorchServe 0.12.",
               (*MODEL_VERSION, "url_path"), responses={"501": VERSIONING})  # fmt: skip


OPENAI_ERROR = {
    "description": "OpenAI's error object.",
    "content": {"application/json": {"schema": {
        "type": "object", "required": ["error"],
        "properties": {"error": {"type": "object",
                                 "required": ["message", "type", "param", "code"]}},
    }}},
}  # fmt: skip
OPENAI_OK = {
    "description": "OpenAI's answer: one JSON object, or server-sent events with stream.",
    "content": {"application/json": {"schema": {"type": "object"}},
                "text/event-stream": {"schema": {"type": "string"}}},
}  # fmt: skip
_TEXT = {"type": "string"}
_STOP = {"type": "string", "minLength": 1, "maxLength": 256}
_SAMPLING = {
    "model": {"type": "string", "pattern": "[^/]"},
    "max_tokens": {"type": "integer", "minimum": 1},
    "max_completion_tokens": {"type": "integer", "minimum": 1},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1},
    "seed": {"type": "integer"},
    "stop": {"oneOf": [_STOP, {"type": "array", "items": _STOP, "maxItems": 4}]},
    "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
    "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
    "stream": {"type": "boolean"},
}
_STREAMED = {  # stream_options only with stream true (OpenAI's 400 otherwise)
    "stream": {"type": "boolean", "enum": [True]},
    "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
}
_MESSAGE = {"anyOf": [  # content required but in an assistant's message
    {"type": "object", "required": ["role", "content"], "additionalProperties": False,
     "properties": {"role": {"enum": ["system", "user", "developer", "tool"]},
                    "content": _TEXT}},
    {"type": "object", "required": ["role"], "additionalProperties": False,
     "properties": {"role": {"enum": ["assistant"]}, "content": _TEXT}},
]}  # fmt: skip


def openai_body(text: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's request object with `text` (prompt or messages) and the sampling fields."""
    (name,) = text

    def shape(*required: str, **more: Any) -> dict[str, Any]:
        return {"type": "object", "required": ["model", name, *required],
                "additionalProperties": False,
                "properties": {**_SAMPLING, **more, **text}}  # fmt: skip

    schema = {"anyOf": [shape(), shape("stream", "stream_options", **_STREAMED)]}
    return {"description": "OpenAI's request object.", "required": True,
            "content": {"application/json": {"schema": schema}}}  # fmt: skip


COMPLETION_BODY = openai_body({"prompt": _TEXT})
CHAT_BODY = openai_body(
    {"messages": {"type": "array", "items": _MESSAGE, "minItems": 1, "maxItems": 1024}}
)


def openai_operation(op_id: str, what: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """An OpenAI-compatible operation (server/http/openai.py): OpenAI's errors, not
    TorchServe's."""
    codes = (*ALWAYS, *INFERENCE_ERRORS)
    extra: dict[str, Any] = {"requestBody": body} if body else {}
    responses = {"200": OPENAI_OK, **{str(code): OPENAI_ERROR for code in codes}}
    responses["405"] = {**OPENAI_ERROR, "headers": NOT_ALLOWED["headers"]}
    return {"description": what, "operationId": op_id, "parameters": [], **extra,
            "responses": responses}  # fmt: skip
