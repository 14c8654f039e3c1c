"""Request envelopes: TorchServe's `ts.torch_handler.request_envelope` wrappers.

An envelope wraps a handler's entry point (`handle(data, context)`): it turns the
rows a model orchestrator sends into the flat items the handler expects, calls the
handler, and turns its outputs back into the orchestrator's shape. TorchServe picks
one with `service_envelope` (config.properties); handlers may also use them
directly. Behaviour, as TorchServe 0.12's:

* `BodyEnvelope`: each row's `data` (else `body`) in, outputs unchanged.
* `JSONEnvelope` (TensorFlow-Serving style): each row carries `{"instances": [...]}`
  (under `data`, `body` or at the top); the instances of all rows are joined into one
  batch (`{"b64": ...}` values decoded to bytes), and the outputs are split back per
  row as the JSON text `{"predictions": [...]}`.
* `KServeEnvelope` (KServe v1): the first row's `instances` (JSON text or bytes are
  parsed) in; one `{"predictions": outputs}` (or `explanations` when the request's
  `explain` header is "True") out.
* `KServev2Envelope` (Open Inference Protocol): each row's `inputs` list in (its `id`
  kept for the answer); out, one `{"id", "model_name", "model_version", "outputs"}`
  with each output as a named, shaped, typed, flattened tensor.

The envelope skips parsing an empty `data` (the load call of a function entry point,
`handle(None, context)`) and formatting an empty result.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from itertools import chain
from typing import Any

from jupyter_serve.wire.oip import flatten, typed_data

HandleFn = Callable[[Any, Any], Any]


class BaseEnvelope:
    """Wraps `handle_fn`; subclasses say how rows come in and outputs go out."""

    def __init__(self, handle_fn: HandleFn) -> None:
        self._handle_fn = handle_fn
        self.context: Any = None

    def handle(self, data: Any, context: Any) -> Any:
        self.context = context
        if data:
            data = self.parse_input(data)
        results = self._handle_fn(data, context)
        if results:
            results = self.format_output(results)
        return results

    def parse_input(self, data: Any) -> Any:
        raise NotImplementedError

    def format_output(self, data: Any) -> Any:
        raise NotImplementedError

    def _explaining(self) -> bool:
        header: Callable[[int, str], Any] | None = getattr(self.context, "get_request_header", None)
        return header is not None and header(0, "explain") == "True"


def _payload(row: Any) -> Any:
    """A row's content: its `data`, else its `body`."""
    return row.get("data") or row.get("body")


def _as_json(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return json.loads(bytes(value).decode("utf-8"))
    if isinstance(value, str):
        return json.loads(value)
    return value


class BodyEnvelope(BaseEnvelope):
    """Each row's `data` or `body`, as a plain list; outputs as they are."""

    def parse_input(self, data: Any) -> list[Any]:
        return [_payload(row) for row in data]

    def format_output(self, data: Any) -> Any:
        return data


class JSONEnvelope(BaseEnvelope):
    """`{"instances": [...]}` rows joined into one batch; `{"predictions": [...]}` per row."""

    def __init__(self, handle_fn: HandleFn) -> None:
        super().__init__(handle_fn)
        self._lengths: list[int] = []

    def parse_input(self, data: Any) -> list[Any]:
        per_row = [self._instances(row) for row in data]
        self._lengths = [len(instances) for instances in per_row]
        return list(chain.from_iterable(per_row))

    def format_output(self, data: Any) -> list[str]:
        answers, start = [], 0
        for length in self._lengths:
            answers.append(json.dumps({"predictions": list(data[start : start + length])}))
            start += length
        return answers

    @staticmethod
    def _instances(row: Any) -> list[Any]:
        content = _as_json(_payload(row) or row)
        instances = list(content["instances"])
        return [_decoded(instance) for instance in instances]


def _decoded(instance: Any) -> Any:
    """`{"b64": text}` becomes bytes, as a whole instance or as one of its fields."""
    if not isinstance(instance, dict):
        return instance
    if list(instance) == ["b64"]:
        return base64.b64decode(instance["b64"])
    return {
        key: base64.b64decode(value["b64"])
        if isinstance(value, dict) and list(value) == ["b64"]
        else value
        for key, value in instance.items()
    }


class KServeEnvelope(BaseEnvelope):
    """KServe v1: the first row's `instances` in; `{"predictions"|"explanations"}` out."""

    def parse_input(self, data: Any) -> Any:
        content = _as_json(_payload(data[0]))
        return content.get("instances")

    def format_output(self, data: Any) -> list[dict[str, Any]]:
        return [{"explanations" if self._explaining() else "predictions": data}]


class KServev2Envelope(BaseEnvelope):
    """Open Inference Protocol: each row's `inputs` in; one v2 response out."""

    def __init__(self, handle_fn: HandleFn) -> None:
        super().__init__(handle_fn)
        self._request_id: str | None = None
        self._names: list[str] = []

    def parse_input(self, data: Any) -> list[Any]:
        rows = []
        for row in data:
            content = _as_json(_payload(row))
            if "id" in content:
                self._request_id = str(content["id"])
            inputs = content.get("inputs")
            self._names = [str(item.get("name", f"input-{i}")) for i, item in enumerate(inputs)]
            rows.append(inputs)
        return rows[0] if len(rows) == 1 else rows

    def format_output(self, data: Any) -> list[dict[str, Any]]:
        manifest = getattr(self.context, "manifest", None) or {}
        model = manifest.get("model", {})
        request_id = self._request_id or self.context.get_request_id(0)
        self._request_id = None
        names = self._names + [f"output-{i}" for i in range(len(self._names), len(data))]
        return [
            {
                "id": request_id,
                "model_name": model.get("modelName", getattr(self.context, "model_name", "")),
                "model_version": model.get("modelVersion"),
                "outputs": [_tensor(name, value) for name, value in zip(names, data, strict=False)],
            }
        ]


def _tensor(name: str, value: Any) -> dict[str, Any]:
    """One output as a v2 tensor: shape of the nested lists, data flattened."""
    value = value.tolist() if hasattr(value, "tolist") else value
    shape: list[int] = []
    level = value
    while isinstance(level, list | tuple):
        shape.append(len(level))
        level = level[0] if level else None
    kind, data = typed_data(flatten(value))
    return {"name": name, "shape": shape, "datatype": kind, "data": data}


ENVELOPES: dict[str, type[BaseEnvelope]] = {
    "body": BodyEnvelope,
    "json": JSONEnvelope,
    "kserve": KServeEnvelope,
    "kservev2": KServev2Envelope,
}
