"""The one exception tree of jupyter_serve, each error carrying its HTTP status.

The `type` of each class is the name TorchServe 0.12 puts in the `type` field of
its error JSON, so that `{"code", "type", "message"}` bodies match TorchServe's::

    * ServeError                 500  InternalServerException
      x BadRequest               400  BadRequestException
        + ArchiveError           400  InvalidModelException   (a malformed or unsafe archive)
          - NotAnArchive         400  InvalidModelException   (neither zip nor tar.gz)
          - UnsafeArchive        400  InvalidModelException   (zip-slip, link escape, zip bomb)
        + DownloadArchive        400  DownloadArchiveException (a model url failed to download)
      x Forbidden                403  ForbiddenException      (no credentials; not authorized)
      x IllegalArgument          403  IllegalArgumentException (a NUL character in a model url)
      x InvalidModelVersion      403  InvalidModelVersionException (removing the default version)
      x ModelNotFound            404  ModelNotFoundException
      x ModelVersionNotFound     404  ModelVersionNotFoundException
      x ResourceNotFound         404  ResourceNotFoundException
      x MethodNotAllowed         405  MethodNotAllowedException
      x RequestTimeout           408  RequestTimeoutException
      x ConflictStatus           409  ConflictStatusException
      x RequestTooLarge          413  RequestEntityTooLargeException
      x ServiceUnavailable       503  ServiceUnavailableException
      x OutOfResources           507  InternalServerException

Routes raise these; one base route turns them into JSON. Nothing here imports
more than the standard library, so the archive code and the workers may use it.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar


class ServeError(Exception):
    """Base of every error jupyter_serve reports to a client."""

    status_code: ClassVar[int] = 500
    error_type: ClassVar[str] = "InternalServerException"

    def __init__(
        self, message: str, *, status_code: int | None = None, cause: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.cause = cause
        if status_code is not None:
            self.status_code = status_code  # type: ignore[misc]

    def to_json(self) -> dict[str, Any]:
        """The TorchServe error body; `cause` (one line: why) only when there is one, beside
        TorchServe's own message, which stays exactly TorchServe's."""
        body: dict[str, Any] = {
            "code": self.status_code,
            "type": self.error_type,
            "message": self.message,
        }
        if self.cause:
            body["cause"] = self.cause
        return body

    def body(self) -> bytes:
        """`to_json` as TorchServe writes it (`torchserve_json`)."""
        return torchserve_json(self.to_json())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status_code={self.status_code})"


class BadRequest(ServeError):
    status_code = 400
    error_type = "BadRequestException"


class ArchiveError(BadRequest):
    """A model archive or its manifest is malformed, or an archive cannot be built."""

    error_type = "InvalidModelException"


class NotAnArchive(ArchiveError):
    """A file given as an archive is neither a zip nor a tar.gz."""


class UnsafeArchive(ArchiveError):
    """An archive tries to write outside its target folder, or is a zip bomb."""


class DownloadArchive(BadRequest):
    """Downloading the archive a register url names failed."""

    error_type = "DownloadArchiveException"


class IllegalArgument(ServeError):
    status_code = 403
    error_type = "IllegalArgumentException"


class InvalidModelVersion(ServeError):
    """The default version cannot be removed while other versions exist."""

    status_code = 403
    error_type = "InvalidModelVersionException"


class ModelNotFound(ServeError):
    status_code = 404
    error_type = "ModelNotFoundException"


class ModelVersionNotFound(ServeError):
    status_code = 404
    error_type = "ModelVersionNotFoundException"


class ResourceNotFound(ServeError):
    status_code = 404
    error_type = "ResourceNotFoundException"


class Forbidden(ServeError):
    """Jupyter refused the request: no or wrong credentials, or the authorizer said no
    (TorchServe's own key check answers 400 InvalidKeyException; this is Jupyter's)."""

    status_code = 403
    error_type = "ForbiddenException"


class MethodNotAllowed(ServeError):
    status_code = 405
    error_type = "MethodNotAllowedException"


class RequestTimeout(ServeError):
    status_code = 408
    error_type = "RequestTimeoutException"


class ConflictStatus(ServeError):
    status_code = 409
    error_type = "ConflictStatusException"


def torchserve_json(value: Any) -> bytes:
    """JSON as TorchServe answers it (and `ServeRoute.write_json` writes it): indent 2 and
    a trailing newline."""
    return (json.dumps(value, indent=2) + "\n").encode()


DEFAULT_MAX_REQUEST_SIZE = 6553500  # bytes: TorchServe's max_request_size, and ServeApp's


class RequestTooLarge(ServeError):
    """The request body exceeds `max_request_size` (Netty's aggregator answers 413), or its
    tensors `max_tensor_elements`."""

    status_code = 413
    error_type = "RequestEntityTooLargeException"

    @classmethod
    def over(cls, limit: int) -> RequestTooLarge:
        """TorchServe's 413 for a body over `limit` bytes."""
        return cls(f"Request size exceeds the limit of {limit} bytes.")


class ServiceUnavailable(ServeError):
    status_code = 503
    error_type = "ServiceUnavailableException"


def no_worker_message(model_name: str, version: str | None = None, job: str = "inference") -> str:
    """TorchServe 0.12's 503 text for "no worker" and "job queue full" alike.

    For an inference job it names the version the request named, with TorchServe's own
    stray closing quote (`Model "m" Version 1.0" has no worker ...`), and ends with its
    note on sequence inference; a describe job's text names the model only.
    """
    if job != "inference":
        return (
            f'Model "{model_name}" has no worker to serve {job} request. '
            "Please use scale workers API to add workers."
        )
    named = (
        f'Model "{model_name}"' if version is None else f'Model "{model_name}" Version {version}"'
    )
    return (
        f"{named} has no worker to serve inference request. "
        "Please use scale workers API to add workers. If this is a sequence inference, "
        "please check if it is closed, or expired; or exceeds maxSequenceJobQueueSize"
    )


def queue_full(model_name: str, version: str | None = None) -> ServiceUnavailable:
    """TorchServe's 503 for a request its model's full job queue (or sequence) cannot take."""
    return ServiceUnavailable(no_worker_message(model_name, version))


class OutOfResources(ServeError):
    status_code = 507
