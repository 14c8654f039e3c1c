"""Wire requests into TorchServe's batch input: `data` for `handle` and per-request headers.

`data` has one dict per request, keyed by parameter name ("body" for a raw body,
the field names of a form). Each value is decoded by its content type, as
TorchServe's backend does when `decode_input_request` is true:

* ``application/json`` (any parameters, e.g. ``; charset=utf-8``): the parsed JSON;
  the raw `bytearray` if it does not parse.
* ``text/*``: a `str`, decoded with the ``charset=`` parameter or UTF-8; the raw
  `bytearray` if the bytes do not decode (lossless: the handler can still decide).
* anything else: a `bytearray`.

With `decode_input_request` false every value stays a `bytearray`.

The headers a handler sees for request `idx` are the request's HTTP headers as
the server sent them (including the `explain`, `url_path` and `describe` headers
the server adds), plus, for each parameter, ``{name: {"content-type": ct}}``; for
the ``describe`` command the worker sets ``describe: "True"`` itself.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..protocol import InferenceRequest, Parameter

JSON_TYPE = "application/json"
DESCRIBE_COMMAND = "describe"


@dataclass(frozen=True)
class BatchInput:
    """What a batch gives the handler: `data`, plus ids and headers for its `Context`."""

    data: list[dict[str, Any]]
    request_ids: list[str]
    headers: list[dict[str, Any]]


def build_batch(
    requests: Sequence[InferenceRequest], command: str = "predict", decode: bool = True
) -> BatchInput:
    """The handler's view of a batch of wire requests."""
    return BatchInput(
        data=[{p.name: decode_value(p, decode) for p in r.parameters} for r in requests],
        request_ids=[r.request_id for r in requests],
        headers=[request_headers(r, command) for r in requests],
    )


def request_headers(request: InferenceRequest, command: str = "predict") -> dict[str, Any]:
    """HTTP headers, then one ``{"content-type": ct}`` entry per parameter name."""
    headers: dict[str, Any] = dict(request.headers)
    for parameter in request.parameters:
        headers[parameter.name] = {"content-type": parameter.content_type}
    if command == DESCRIBE_COMMAND:
        headers["describe"] = "True"
    return headers


def decode_value(parameter: Parameter, decode: bool = True) -> Any:
    """A parameter's value as TorchServe hands it to `handle`."""
    raw = bytearray(parameter.value)
    if not decode:
        return raw
    media_type, charset = split_content_type(parameter.content_type)
    if media_type == JSON_TYPE:
        try:
            return json.loads(raw.decode(charset or "utf-8"))
        except (UnicodeDecodeError, ValueError):
            return raw
    if media_type.startswith("text/"):
        try:
            return raw.decode(charset or "utf-8")
        except UnicodeDecodeError:
            return raw
    return raw


def split_content_type(content_type: str) -> tuple[str, str | None]:
    """(lower-cased media type, a known charset or None) of a Content-Type value."""
    media_type, *params = content_type.split(";")
    charset = None
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            charset = _known_codec(value.strip().strip('"'))
    return media_type.strip().lower(), charset


def _known_codec(name: str) -> str | None:
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None
