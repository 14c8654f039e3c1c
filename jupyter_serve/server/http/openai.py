"""OpenAI-compatible routes under `{base_url}serve/v1/`: models, completions, chat completions.

`GET v1/models` lists the served language models (handler `causal_lm`), each version as
"name/version" beside its default "name". `GET v1/models/{id}` is KServe v1's readiness
route (kserve.py, as in TorchServe); for a language model its answer also carries OpenAI's
model object (`retrieve_model`), so `client.models.retrieve(id)` works.
`POST v1/completions` and `v1/chat/completions` read the request (server/http/
openai_format.py: checked before anything is queued) and send it to the model as one
prediction, through the same `Exchange` as `predictions/{m}` (404, 503, the model's queue
and continuous batching, client timeouts, metrics): a client that leaves cancels its
request, which frees its place in the running batch at the next step. The handler's
per-step JSON lines become server-sent events (`data: {...}`, then `data: [DONE]`) with
`stream: true`, else one JSON answer.

Who may: `execute` on `serve`, as predictions; an inference key is a valid `api_key`
(`Authorization: Bearer <key>`), its scope checked against the body's `model`. Errors,
those of Jupyter's own checks included, are OpenAI's `{"error": {message, type, param,
code}}` with their status. Bodies are capped at MAX_BODY (a 413).
"""

from __future__ import annotations

import json
from typing import Any

from tornado.http1connection import HTTP1Connection

from jupyter_serve.server.http.access import EXECUTE, allow
from jupyter_serve.server.http.exchange import Job, Writer
from jupyter_serve.server.http.inference import HandlerWriter, InferenceRoute
from jupyter_serve.server.http.openai_format import (
    Answer,
    OpenAIBadRequest,
    OpenAIRequest,
    error_json,
    read_openai,
)
from jupyter_serve.server.registry import Model, ModelRegistry
from jupyter_serve.wire.errors import ModelNotFound, RequestTooLarge, ServeError
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult, Parameter

__all__ = [
    "ROUTES",
    "ChatCompletionsRoute",
    "CompletionsRoute",
    "OpenAIModelsRoute",
    "retrieve_model",
]

MAX_BODY = 1 << 20
LANGUAGE_HANDLERS = frozenset({"causal_lm"})
JSON_TYPE = "application/json"
_UNREAD = object()


def is_language_model(model: Model) -> bool:
    return model.spec.handler in LANGUAGE_HANDLERS


def model_object(model_id: str, model: Model) -> dict[str, Any]:
    """OpenAI's model object for a language model (or one of its versions)."""
    return {"id": model_id, "object": "model", "created": int(model.registered_at),
            "owned_by": "jupyter_serve"}  # fmt: skip


def retrieve_model(registry: ModelRegistry, model_id: str) -> tuple[Model, dict[str, Any]]:
    """`GET v1/models/{model_id}` (KServe v1's readiness, kserve.py): the model, and for a
    language model OpenAI's model object, as `v1/models` lists it, to answer beside KServe's
    "name" and "ready" ({} for other models). A "name/version" id names a language model's
    version; anything else is the same 404 as before."""
    name, slash, version = model_id.partition("/")
    if not slash:
        model = registry.get(name)
        return model, model_object(model_id, model) if is_language_model(model) else {}
    try:
        versioned = registry.get(name, version) if version else None
    except ServeError:
        versioned = None
    if versioned is None or not is_language_model(versioned):
        raise ModelNotFound(f"Model not found: {model_id}")
    return versioned, model_object(model_id, versioned)


class OpenAIRoute(InferenceRoute):
    """The OpenAI routes' base: OpenAI's error JSON, the body read once and capped."""

    _body: Any = _UNREAD

    def body_size_error(self) -> ServeError | None:
        too_large = super().body_size_error()
        if too_large is None and len(self.request.body or b"") > MAX_BODY:
            return RequestTooLarge(f"The request body is larger than {MAX_BODY} bytes.")
        return too_large

    def body_json(self) -> Any:
        """The body's JSON (400 when it is not JSON), parsed once."""
        if self._body is _UNREAD:
            try:
                self._body = json.loads(self.request.body or b"null")
            except (ValueError, RecursionError):
                self._body = None
                raise OpenAIBadRequest("We could not parse the JSON body of your request.") \
                    from None  # fmt: skip
        return self._body

    def requested_model(self) -> str | None:
        """The model the body names, for an inference key's scope."""
        try:
            body = self.body_json()
        except OpenAIBadRequest:
            return None
        model = body.get("model") if isinstance(body, dict) else None
        return model.partition("/")[0] if isinstance(model, str) else None

    def error_body(self, error: ServeError) -> bytes:
        param, code = getattr(error, "param", None), getattr(error, "code", None)
        message = error.message
        if error.status_code == 404 and code is None:
            code = "model_not_found"
            message = f"The model `{self.requested_model()}` does not exist: {message}."
        return json.dumps(error_json(error.status_code, message, param, code)).encode()


class OpenAIModelsRoute(OpenAIRoute):
    """`GET v1/models`: the served language models. (`v1/models/{m}` is KServe v1's
    readiness, kserve.py, as TorchServe answers it, with `retrieve_model`'s fields.)"""

    @allow(EXECUTE)
    def get(self) -> None:
        self.write_json({"object": "list", "data": self.entries()})

    def entries(self) -> list[dict[str, Any]]:
        entries = []
        for name in self.registry.names():
            versions = [m for m in self.registry.versions(name) if is_language_model(m)]
            default = self.registry.default_version(name)
            for model in versions:
                ids = [name, f"{name}/{model.version}"] if model.version == default \
                    else [f"{name}/{model.version}"]  # fmt: skip
                entries += [model_object(model_id, model) for model_id in ids]
        return entries


class CompletionRoute(OpenAIRoute):
    """A completion: the request checked, then one prediction of the model it names."""

    chat = False
    openai: OpenAIRequest | None = None
    answer: Answer | None = None

    @allow(EXECUTE)
    async def post(self) -> None:
        self.openai = read_openai(self.body_json(), self.chat)
        self.answer = Answer(self.openai, self.request_id)
        await self.respond(self.job)

    def job(self) -> Job:
        openai = self.openai
        assert openai is not None
        model = self.registry.get(openai.name, openai.version)
        if not is_language_model(model):
            raise OpenAIBadRequest(f"The model `{openai.model}` is not a language model "
                                   "(its handler is not causal_lm).", "model")  # fmt: skip
        body = json.dumps(openai.generation.to_json()).encode()
        request = InferenceRequest(self.request_id, {"content-type": JSON_TYPE},
                                   (Parameter("body", JSON_TYPE, body),))  # fmt: skip
        return Job(openai.name, openai.version, request)

    def make_writer(self) -> Writer:
        assert self.answer is not None
        return OpenAIWriter(self, self.answer)


class CompletionsRoute(CompletionRoute):
    """`POST v1/completions`."""


class ChatCompletionsRoute(CompletionRoute):
    """`POST v1/chat/completions`."""

    chat = True


class OpenAIWriter(HandlerWriter):
    """Writes the handler's JSON lines (jupyter_serve/handlers/causal_lm.py) as OpenAI's
    answer: server-sent events, or one object."""

    def __init__(self, route: CompletionRoute, answer: Answer) -> None:
        super().__init__(route)
        self.answer_ = answer
        self.stream = answer.request.stream
        self.parts: list[str] = []
        self.finish_reason: str | None = None

    def answer(self, result: InferenceResult) -> None:
        """A one-step answer, or the handler's refusal."""
        if result.status != 200:
            self.error(_handler_error(result))
            return
        self.begin(result)
        self.end(b"")

    def begin(self, result: InferenceResult) -> None:
        if self.stream:
            self.start_events()
        self.chunk(bytes(result.body))

    def chunk(self, body: bytes) -> None:
        text = self.read(body)
        if not self.stream:
            self.parts.append(text)
        elif text:
            self.event(self.answer_.chunk(text, None))

    def end(self, body: bytes) -> None:
        self.chunk(body)
        if not self.stream:
            self.route.set_header("Content-Type", JSON_TYPE)
            whole = self.answer_.whole("".join(self.parts), self.finish_reason)
            self.finish(json.dumps(whole).encode())
            return
        self.event(self.answer_.last_chunk(self.finish_reason))
        if self.answer_.request.include_usage:
            self.event(self.answer_.usage_chunk())
        self.finish(b"data: [DONE]\n\n")

    def start_events(self) -> None:
        route = self.route
        route.set_header("Content-Type", "text/event-stream; charset=utf-8")
        route.set_header("Cache-Control", "no-cache")
        route.set_header("X-Accel-Buffering", "no")  # a proxy must not hold the events
        connection = route.request.connection
        if isinstance(connection, HTTP1Connection):
            connection.stream.set_nodelay(True)
        if self.answer_.request.chat:
            self.event(self.answer_.chunk(None, None))

    def event(self, data: dict[str, Any]) -> None:
        self.route.write(b"data: " + json.dumps(data).encode() + b"\n\n")
        self.route.flush()

    def read(self, body: bytes) -> str:
        """A step's text, noting its finish reason and token counts."""
        if not body:
            return ""
        try:
            line = json.loads(body)
        except ValueError:
            line = None
        if not isinstance(line, dict):  # not the causal_lm handler's line: its text as is
            return body.decode("utf-8", "replace")
        self.finish_reason = line.get("finish_reason") or self.finish_reason
        self.answer_.prompt_tokens = int(line.get("prompt_tokens") or 0)
        self.answer_.completion_tokens = int(line.get("completion_tokens") or 0)
        return str(line.get("text") or "")


def _handler_error(result: InferenceResult) -> ServeError:
    """The handler's error answer (TorchServe's JSON, maybe with OpenAI's param and code)."""
    try:
        body = json.loads(result.body)
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    message = str(body.get("message") or result.reason or "The model refused the request.")
    error = OpenAIBadRequest(message, body.get("param"), body.get("error_code"))
    return error.with_status(result.status)


ROUTES: list[tuple[str, type[Any]]] = [
    (r"v1/models/?", OpenAIModelsRoute),
    (r"v1/completions/?", CompletionsRoute),
    (r"v1/chat/completions/?", ChatCompletionsRoute),
]
"""(path under `serve/`, route) pairs, added to the app's routes."""
