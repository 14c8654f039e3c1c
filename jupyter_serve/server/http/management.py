"""Management routes: list, register, describe, scale, unregister, set-default.

TorchServe's management API under `{base_url}serve/`:

* ``GET models`` (limit, next_page_token) and ``POST models`` (register, from
  query args or a JSON body; see `params`);
* ``GET models/{m}[/{v}|/all]`` describe (``customized=true`` asks a worker for
  the handler's `describe_handle()`), ``PUT models/{m}[/{v}]`` scale,
  ``DELETE models/{m}[/{v}]`` unregister (a trailing slash is accepted);
* ``PUT models/{m}/{v}/set-default``.

Register and unregister answer 405 when `ServeApp.enable_model_api` is off.
State changes answer `{"status": message}` with the registry's status.
"""

from __future__ import annotations

import json
from typing import Any

from jupyter_serve.server.http.access import READ, WRITE, allow
from jupyter_serve.server.http.base import ServeRoute
from jupyter_serve.server.http.openapi import model_management_api
from jupyter_serve.server.http.params import (
    Args,
    bool_arg,
    check_worker_ceiling,
    json_args,
    optional_int,
    page_args,
    query_args,
    register_args,
    scale_args,
)
from jupyter_serve.server.http.requests import handler_headers
from jupyter_serve.server.pool.logs import newest_fitting
from jupyter_serve.wire.errors import MethodNotAllowed, ServeError
from jupyter_serve.wire.protocol import InferenceRequest

MODEL_API_DISABLED = "Requested method is not allowed, please refer to API document."
JSON_TYPE = "application/json"


class ManagementRoute(ServeRoute):
    """Shared helpers of the management routes."""

    def query(self) -> dict[str, str]:
        return query_args(self.request.query_arguments)

    def body_or_query(self) -> Args:
        """A JSON body's keys when the request carries one, else the query args."""
        content_type = self.request.headers.get("Content-Type", "")
        is_json = content_type.split(";", 1)[0].strip().lower() == JSON_TYPE
        if is_json and self.request.body.strip():
            return json_args(self.request.body)
        return self.query()

    def check_model_api(self) -> None:
        """Register and unregister are off unless `ServeApp.enable_model_api`."""
        if not self.settings["serve_app"].enable_model_api:
            raise MethodNotAllowed(MODEL_API_DISABLED)

    @property
    def worker_ceiling(self) -> int:
        """The most workers one model version may ask for (`max_workers_per_model`)."""
        return int(self.settings["serve_app"].max_workers_per_model)

    def write_status(self, outcome: tuple[int, str]) -> None:
        status, message = outcome
        self.write_json({"status": message}, status)


class ModelsRoute(ManagementRoute):
    """`GET models` lists the models; `POST models` registers one."""

    @allow(READ)
    def get(self) -> None:
        limit, token = page_args(self.query())
        self.write_json(self.registry.list_models(limit, token))

    @allow(WRITE)
    async def post(self) -> None:
        self.check_model_api()
        args = register_args(self.body_or_query())
        check_worker_ceiling(self.worker_ceiling, initial_workers=args.params.initial_workers)
        outcome = await self.registry.register(args.url, args.params, synchronous=args.synchronous)
        self.write_status(outcome)


class ModelRoute(ManagementRoute):
    """`models/{m}[/{v}]`: GET describes, PUT scales, DELETE unregisters."""

    @allow(READ)
    async def get(self, name: str, version: str | None = None) -> None:
        described = self.registry.describe(name, version)
        if version != "all" and bool_arg(self.query(), "customized", False):
            metadata = await self._customized(name, version)
            if metadata is not None:
                described[0]["customizedMetadata"] = metadata
        self.write_json(described)

    @allow(WRITE)
    async def put(self, name: str, version: str | None = None) -> None:
        query = self.query()
        self.registry.get(name, version or query.get("model_version") or None)  # 404 first
        args = scale_args(query, version)
        check_worker_ceiling(self.worker_ceiling, min_worker=args.min_worker,
                             max_worker=args.max_worker)  # fmt: skip
        outcome = await self.registry.scale(
            name, args.version, args.min_worker, args.max_worker, args.synchronous
        )
        self.write_status(outcome)

    @allow(WRITE)
    async def delete(self, name: str, version: str | None = None) -> None:
        self.check_model_api()  # synchronous and timeout are accepted and ignored
        self.write_status(await self.registry.unregister(name, version))

    @allow(READ)
    def options_document(self, name: str, version: str | None = None) -> None:
        model = self.registry.get(name, version)
        self.write_json(model_management_api(model, str(self.base_url)))

    async def _customized(self, name: str, version: str | None) -> dict[str, Any] | None:
        """The handler's describe answer as TorchServe 0.12 shows it: a JSON object as
        is, any other non-empty answer (text, null, a list) as `{}`, and no
        `customizedMetadata` at all (None) for an empty one.

        The job carries this response's `x-request-id` and the request's headers (without
        Jupyter's credentials, as every request a handler sees).
        """
        model = self.registry.get(name, version)
        headers = handler_headers(self.request)
        request = InferenceRequest(self.request_id, headers, ())
        result = await model.pool.predict_one(request, command="describe")
        text = bytes(result.body).decode("utf-8", "replace")
        if result.status >= 400:
            raise ServeError(result.reason or text, status_code=result.status)
        if not text:
            return None
        try:
            metadata = json.loads(text)
        except (ValueError, RecursionError):
            return {}
        return metadata if isinstance(metadata, dict) else {}


class SetDefaultRoute(ManagementRoute):
    """`PUT models/{m}/{v}/set-default`: the version unversioned routes use."""

    @allow(WRITE)
    def put(self, name: str, version: str) -> None:
        self.write_status(self.registry.set_default(name, version))


class LogsRoute(ManagementRoute):
    """`logs/{m}[/{v}]?lines=N`: recent worker output (jupyter_serve's, not TorchServe's).

    Also answers for a model whose register just failed, so its traceback can be shown.
    The answer holds the newest of those lines that fit in `MAX_ANSWER_BYTES` of JSON
    (jupyter_serve.server.pool.logs), however long the lines a handler printed.
    """

    @allow(READ)
    def get(self, name: str, version: str | None = None) -> None:
        limit = optional_int(self.query(), "lines")
        lines = newest_fitting(self.registry.logs(name, version, limit))
        self.write_json({"modelName": name, "lines": lines})


ROUTES: list[tuple[str, type[Any]]] = [
    (r"logs/([^/]+)(?:/([^/]+))?/?", LogsRoute),
    (r"models/?", ModelsRoute),
    (r"models/([^/]+)/([^/]+)/set-default/?", SetDefaultRoute),
    (r"models/([^/]+)(?:/([^/]+))?/?", ModelRoute),
]
