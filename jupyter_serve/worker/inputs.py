"""Wire requests into TorchServe's batch input: `data` for `handle` and per-request headers.

`data` has one dict per request, keyed by parameter name ("body" for a raw body,
the field names of a form). Each value is decoded by its content type, as
TorchServe's backend does when `decode_input_request` is true:

* ``application/json`` (any parameters, e.g. ``; charset=utf-8``): the parsed JSON;
  the raw `bytearray` if it does not decode or parse. JSON nesting deeper than the
  interpreter's recursion limit (about 1,000 levels) cannot be handed over, so it
  makes the request a 400 ("JSON nests too deeply").
* ``text/*``: a `str`, decoded with the ``charset=`` parameter or UTF-8; the raw
  `bytearray` if the bytes do not decode (lossless: the handler can still decide).
* anything else: a `bytearray`.

With `decode_input_request` false every value stays a `bytearray`.

Only a text encoding counts as a charset. A name Python does not know
(``utf8mb4``), a codec that is not a text encoding (``zlib``, ``base64``,
``hex``, ``rot13``) or one of Python's own escape codecs, which no HTTP client means by a
charset and which warn on some inputs (``unicode-escape``, ``raw-unicode-escape``,
``punycode``, ``idna``) is ignored as if the parameter were absent: the value is read
as UTF-8 and stays raw bytes when it is not UTF-8. TorchServe reads every body as
UTF-8 whatever its charset, so a handler sees what it would see there.

Nothing a request contains can fail its batch or the worker: `build_batch` decodes
each request on its own, and a request it cannot decode (an `InvalidInput`, or any
exception nobody foresaw) is left out of `data` and answered by itself with 400
and TorchServe's error JSON (`BatchInput.rejected`). The handler sees the other
requests, numbered from 0; `BatchInput.answers` puts the rejected requests' 400s
back in their places among the handler's results.

The headers a handler sees for request `idx` are the request's HTTP headers as
the server sent them (including the `explain`, `url_path` and `describe` headers
the server adds), plus, for each parameter, ``{name: {"content-type": ct}}``; for
the ``describe`` command the worker sets ``describe: "True"`` itself.
"""

from __future__ import annotations

import codecs
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyter_serve.wire.errors import BadRequest
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult, Parameter
from jupyter_serve.worker.failures import error_result, format_traceback

JSON_TYPE = "application/json"
DESCRIBE_COMMAND = "describe"
TOO_DEEP = "JSON nests too deeply"
UNDECODABLE = "Cannot decode the request's inputs"


class InvalidInput(BadRequest):
    """A request's inputs cannot be handed to the handler: that request gets a 400."""


@dataclass(frozen=True)
class BatchInput:
    """What a batch gives the handler: `data`, plus ids and headers for its `Context`.

    `rejected` maps the wire position of each request that could not be decoded to
    its 400 answer; those requests are in none of the lists.
    """

    data: list[dict[str, Any]] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)
    headers: list[dict[str, Any]] = field(default_factory=list)
    rejected: dict[int, InferenceResult] = field(default_factory=dict)

    def answers(self, results: Sequence[InferenceResult]) -> list[InferenceResult]:
        """The results for the accepted requests, with the rejected ones' in wire order."""
        accepted = iter(results)
        size = len(results) + len(self.rejected)
        return [self.rejected[i] if i in self.rejected else next(accepted) for i in range(size)]


def build_batch(
    requests: Sequence[InferenceRequest], command: str = "predict", decode: bool = True
) -> BatchInput:
    """The handler's view of a batch of wire requests; never raises for what they contain."""
    batch = BatchInput()
    for idx, request in enumerate(requests):
        try:
            data = {p.name: decode_value(p, decode) for p in request.parameters}
            headers = request_headers(request, command)
        except Exception as exc:  # the one place a request's content may fail: its own 400
            batch.rejected[idx] = reject(request, exc)
        else:
            batch.data.append(data)
            batch.request_ids.append(request.request_id)
            batch.headers.append(headers)
    return batch


def reject(request: InferenceRequest, exc: Exception) -> InferenceResult:
    """The 400 answer to a request whose inputs raised `exc`, logged to stderr."""
    if isinstance(exc, InvalidInput):
        error, detail = exc, ""
    else:  # not foreseen: the traceback shows where decoding broke
        summary = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        error, detail = InvalidInput(f"{UNDECODABLE} ({summary})"), format_traceback(exc)
    log = f"Request {request.request_id} rejected: {error.message}\n{detail}"
    print(log.rstrip(), file=sys.stderr, flush=True)
    return error_result(request.request_id, error)


def request_headers(request: InferenceRequest, command: str = "predict") -> dict[str, Any]:
    """HTTP headers, then one ``{"content-type": ct}`` entry per parameter name."""
    headers: dict[str, Any] = dict(request.headers)
    for parameter in request.parameters:
        headers[parameter.name] = {"content-type": parameter.content_type}
    if command == DESCRIBE_COMMAND:
        headers["describe"] = "True"
    return headers


def decode_value(parameter: Parameter, decode: bool = True) -> Any:
    """A parameter's value as TorchServe hands it to `handle`.

    Raises:
        InvalidInput: JSON that nests too deeply to parse.
    """
    raw = bytearray(parameter.value)
    if not decode:
        return raw
    media_type, charset = split_content_type(parameter.content_type)
    if media_type == JSON_TYPE:
        return _json_value(raw, charset, parameter.name)
    if media_type.startswith("text/"):
        text = _text(raw, charset)
        return raw if text is None else text
    return raw


def split_content_type(content_type: str) -> tuple[str, str | None]:
    """(lower-cased media type, a known text encoding or None) of a Content-Type value."""
    media_type, *params = content_type.split(";")
    charset = None
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            charset = text_encoding(value.strip().strip('"'))
    return media_type.strip().lower(), charset


PYTHON_ONLY_CODECS = frozenset({"unicode-escape", "raw-unicode-escape", "punycode", "idna"})


def text_encoding(name: str) -> str | None:
    """The codec `name` names if it is a text encoding (bytes to str) a client can mean by
    a charset, else None."""
    try:
        info = codecs.lookup(name)
    except (LookupError, ValueError):  # unknown, or no codec name at all ("a\0b")
        return None
    if info.name in PYTHON_ONLY_CODECS:
        return None
    try:
        b"a".decode(info.name)  # bytes.decode refuses zlib, base64, hex, rot13...
    except LookupError:
        return None
    except UnicodeError:  # a text encoding that refuses every input ("undefined")
        pass
    return info.name


def _text(raw: bytearray, charset: str | None) -> str | None:
    try:
        return raw.decode(charset or "utf-8")
    except UnicodeError:  # UnicodeDecodeError, and the bare UnicodeError of idna/punycode
        return None


def _json_value(raw: bytearray, charset: str | None, name: str) -> Any:
    text = _text(raw, charset)
    if text is None:
        return raw
    try:
        return json.loads(text)
    except RecursionError:
        raise InvalidInput(f"{TOO_DEEP} (input {name!r})") from None
    except ValueError:
        return raw
