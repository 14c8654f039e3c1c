"""Turn an HTTP request into an `InferenceRequest` with TorchServe's parsing rules.

TorchServe's frontend (`InferenceRequestHandler.parseRequest`):

* a `multipart/form-data` or `application/x-www-form-urlencoded` body becomes one
  parameter per form field (a repeated name keeps the last value); uploaded files
  carry their part's content type, plain fields none (the handler gets bytes);
* any other body becomes one parameter named `body`, tagged with the request's
  content type;
* every HTTP header is forwarded to the handler; the frontend adds `explain`
  ("True"/"False") and, for extra path segments after the version, `url_path`.

Except Jupyter's own credentials: `Authorization` (the token or an inference key),
`Cookie` (the login cookie) and the XSRF token headers tornado reads (`X-XSRFToken`,
`X-CSRFToken`) never reach handler code
(`handler_headers`), which must not be able to act as the user who called it, nor
does a client's `X-Jupyter-Serve-Kserve` (the server's own word to the worker), nor a
`Referer`'s `?token=` (its credential-looking query values show as `[secret]`); nor do
the arguments jupyter_server reads credentials from, `token` and `_xsrf`, whether
they come as form fields or (on the routes that forward the query) query arguments
(`handler_arguments`).
"""

from __future__ import annotations

import itertools
import secrets
from typing import TypeVar

from tornado.httputil import HTTPServerRequest

from jupyter_serve.server.http.lane_http import is_form
from jupyter_serve.wire.logsafe import hide_secrets
from jupyter_serve.wire.protocol import KSERVE_HEADER, InferenceRequest, Parameter

CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "x-xsrftoken", "x-csrftoken"})
NOT_FORWARDED = CREDENTIAL_HEADERS | {KSERVE_HEADER.lower()}  # ours only: the server sets it
CREDENTIAL_ARGUMENTS = frozenset({"token", "_xsrf"})
Values = TypeVar("Values")
"""Arguments jupyter_server takes credentials from (`?token=`, a form's `_xsrf`)."""


_ID_PREFIX = f"{secrets.randbits(32):08x}-{secrets.randbits(16):04x}-4{secrets.randbits(12):03x}"
_ID_COUNTER = itertools.count(secrets.randbits(62))


# What TorchServe's frontend sends on every answer, so that no browser or proxy caches one.
NO_CACHE_HEADERS = {
    "Pragma": "no-cache",
    "Cache-Control": "no-cache; no-store, must-revalidate, private",
    "Expires": "Thu, 01 Jan 1970 00:00:00 UTC",
}


def new_request_id() -> str:
    """A request id as TorchServe formats them: an RFC 4122 version-4 UUID string.

    Its first 60 bits are random per server process and its last 62 a counter from a
    random start, so ids never repeat within a process and collide across processes no
    more than random UUIDs would; one formatting per request instead of `uuid.uuid4()`'s
    `UUID` object (the lane's profile showed it per prediction).
    """
    count = next(_ID_COUNTER) & (1 << 62) - 1
    return f"{_ID_PREFIX}-{0x8000 | count >> 48:04x}-{count & 0xFFFFFFFFFFFF:012x}"


def to_inference_request(
    request: HTTPServerRequest,
    request_id: str,
    *,
    explain: bool = False,
    url_path: str | None = None,
) -> InferenceRequest:
    """The `InferenceRequest` the worker's handler sees for this HTTP request."""
    headers = handler_headers(request)
    headers["explain"] = "True" if explain else "False"
    if url_path:
        headers["url_path"] = url_path
    return InferenceRequest(request_id, headers, tuple(_parameters(request)))


def raw_body_request(
    request: HTTPServerRequest, request_id: str, *, explain: bool = False
) -> InferenceRequest:
    """`to_inference_request`'s headers with the body as its one `body` parameter, unparsed
    whatever its content type (the KServe routes' bodies: the worker opens them)."""
    headers = handler_headers(request)
    headers["explain"] = "True" if explain else "False"
    content_type = request.headers.get("Content-Type", "")
    return InferenceRequest(
        request_id, headers, (Parameter("body", content_type, request.body or b""),)
    )


def handler_headers(request: HTTPServerRequest) -> dict[str, str]:
    """The request's headers a handler may see: all but Jupyter's credentials, and a
    `Referer` (the browser's page url, `?token=` and all) with its secrets hidden."""
    return {
        name: hide_secrets(value) if name.lower() == "referer" else value
        for name, value in request.headers.get_all()
        if name.lower() not in NOT_FORWARDED
    }


def handler_arguments(arguments: dict[str, Values]) -> dict[str, Values]:
    """Query arguments, form fields or files a handler may see: all but those named as
    jupyter_server's credentials are."""
    return {name: values for name, values in arguments.items()
            if name not in CREDENTIAL_ARGUMENTS}  # fmt: skip


def _parameters(request: HTTPServerRequest) -> list[Parameter]:
    content_type = request.headers.get("Content-Type", "")
    if not is_form(content_type):
        return [Parameter("body", content_type, request.body or b"")]
    fields: dict[str, Parameter] = {}
    for name, values in handler_arguments(request.body_arguments).items():
        if values:
            fields[name] = Parameter(name, "", values[-1])
    for name, files in handler_arguments(request.files).items():
        if files:
            upload = files[-1]
            fields[name] = Parameter(name, upload.content_type or "", upload.body)
    return list(fields.values())
