"""The kernel side's HTTP client of jupyter_serve's routes: `ServeClient`.

Magics and widgets run in a kernel, a different process from the Jupyter server,
and talk to it over HTTP with the server's token. Which server, and its token, is
discovery.py's `discover` (its names are re-exported here, where the kernel side
imports them). Standard library only (urllib): the kernel side never imports
tornado or jupyter_server (tests/test_layering.py).

`ServeClient.register` takes a path of the kernel's machine too: an archive the
server may read where it is (the same machine: its model store, a
`jupyter_serve_work` folder) is registered there; any other is uploaded into the
server's model store first (`PUT model-store/{file}`, `ServeClient.upload`) and
registered by its store name, so it works against a server on another machine.
"""

from __future__ import annotations

import difflib
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from jupyter_serve.kernel import discovery
from jupyter_serve.kernel.discovery import (
    PREFIX,
    TOKEN_ENV,
    URL_ENV,
    ServerInfo,
    ServerNotFound,
    current_kernel_id,
    runtime_dir,
)

__all__ = [
    "PREFIX",
    "TOKEN_ENV",
    "URL_ENV",
    "NotAnArchive",
    "Response",
    "ServeClient",
    "ServeClientError",
    "ServerInfo",
    "ServerNotFound",
    "UploadError",
    "client_error",
    "current_kernel_id",
    "discover",
    "local_archive",
    "runtime_dir",
]


class ServeClientError(Exception):
    """The server answered with an error: TorchServe's `{"code", "type", "message"}`,
    jupyter_serve's one-line `cause` when the body has one, and the client's own `hint`
    of what to do (e.g. "did you mean mnistnb?" for a model name that is not served)."""

    def __init__(
        self, status: int, error_type: str, message: str, cause: str | None = None
    ) -> None:
        super().__init__(f"{status} {error_type}: {message}")
        self.status = status
        self.error_type = error_type
        self.message = message
        self.cause = cause
        self.hint = ""

    def __str__(self) -> str:
        said = f"{self.status} {self.error_type}: {self.message}"
        return f"{said} ({self.hint})" if self.hint else said


class UploadError(ServeClientError):
    """Uploading a local archive into the server's model store failed (its message says
    which file)."""


class NotAnArchive(ValueError):
    """A local register path that is a folder: only archive files can be uploaded."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class ServeClient:
    """A synchronous client of jupyter_serve's TorchServe routes."""

    def __init__(self, server: ServerInfo, *, timeout: float = 120.0) -> None:
        self.server = server
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: bytes | IO[bytes] | None = None,
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """Send one request to `{url}serve/{path}`; raise `ServeClientError` on >= 400.

        A file `body` is streamed (give its Content-Length in `headers`)."""
        request = self._prepared(method, path, params, body, content_type, headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return Response(answer.status, dict(answer.headers.items()), answer.read())
        except urllib.error.HTTPError as error:
            raise client_error(error.code, error.read()) from None

    def stream_lines(self, method: str, path: str, body: Any) -> Iterator[bytes]:
        """Send `body` as JSON to `{url}serve/{path}`; the answer's lines as they arrive
        (server-sent events); `ServeClientError` on >= 400."""
        request = self._prepared(method, path, None, json.dumps(body).encode(),
                                 "application/json", None)  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                yield from iter(answer.readline, b"")
        except urllib.error.HTTPError as error:
            raise client_error(error.code, error.read()) from None

    def _prepared(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: bytes | IO[bytes] | None,
        content_type: str | None,
        headers: Mapping[str, str] | None,
    ) -> urllib.request.Request:
        """The request to `{url}serve/{path}` with its query, token and headers."""
        url = urllib.parse.urljoin(self.server.serve_url, path)
        query = {k: _param(v) for k, v in (params or {}).items() if v is not None}
        if query:
            url += "?" + urllib.parse.urlencode(query)
        request = urllib.request.Request(url, data=body, method=method)
        if self.server.token:
            request.add_header("Authorization", f"token {self.server.token}")
        if content_type:
            request.add_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        return request

    def request_json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    # ---- TorchServe's routes -------------------------------------------------

    def ping(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request_json("GET", "ping")
        return result

    def list_models(self) -> list[dict[str, Any]]:
        models: list[dict[str, Any]] = self.request_json("GET", "models")["models"]
        return models

    def register(self, url: str, *, overwrite: bool = False, **params: Any) -> dict[str, Any]:
        """Register `url`: a name in the server's model store, an http(s) url, or a path of
        this machine (module docstring).

        Args:
            url: What to register; an existing local file is this machine's file.
            overwrite: Replace an archive of the same name but other content in the model
                store when the file must be uploaded (else `UploadError` 409).
            **params: TorchServe's register parameters (model_name, initial_workers, ...).

        Returns:
            The server's answer; with "uploaded": the store name when it was uploaded.

        Raises:
            NotAnArchive: `url` is a local folder (build an archive of it first).
            UploadError: the upload was refused.
            ServeClientError: the register was refused.
        """
        local = local_archive(url)
        if local is None:
            return self._register(url, params)
        try:
            return self._register(str(local), params)  # the server may read it where it is
        except ServeClientError as error:
            if error.status != 404:
                raise
        stored = self.upload(local, overwrite=overwrite)["url"]
        return {**self._register(stored, params), "uploaded": stored}

    def _register(self, url: str, params: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request_json("POST", "models", params={"url": url, **params})
        return result

    def upload(
        self, path: str | os.PathLike[str], name: str | None = None, *, overwrite: bool = False
    ) -> dict[str, Any]:
        """Stream a local archive into the server's model store as `name` (its file name).

        Returns:
            `{"status": ..., "url": store name}`; register that url.

        Raises:
            UploadError: refused (400 a name that is not an archive's, 409 taken by other
                content unless `overwrite`, 413 over the server's `max_download_size`).
        """
        local = Path(path)
        target = name or local.name
        store_path = "model-store/" + urllib.parse.quote(target, safe="")
        size = {"Content-Length": str(local.stat().st_size)}
        try:
            with local.open("rb") as body:
                result: dict[str, Any] = self.request_json(
                    "PUT", store_path, params={"overwrite": overwrite or None}, body=body,
                    content_type="application/octet-stream", headers=size,
                )  # fmt: skip
        except ServeClientError as error:
            message = f"uploading {local.name}: {error.message}"
            raise UploadError(error.status, error.error_type, message, error.cause) from None
        return result

    def scale(self, name: str, version: str | None = None, **params: Any) -> dict[str, Any]:
        with self.naming(name):
            path = _model_path(name, version)
            result: dict[str, Any] = self.request_json("PUT", path, params=params)
        return result

    def unregister(self, name: str, version: str | None = None) -> dict[str, Any]:
        with self.naming(name):
            result: dict[str, Any] = self.request_json("DELETE", _model_path(name, version))
        return result

    def describe(self, name: str, version: str | None = None, **params: Any) -> list[Any]:
        with self.naming(name):
            path = _model_path(name, version)
            result: list[Any] = self.request_json("GET", path, params=params)
        return result

    def logs(self, name: str, version: str | None = None, lines: int = 200) -> list[str]:
        """The newest `lines` lines its workers printed (jupyter_serve's `logs/{m}[/{v}]`)."""
        with self.naming(name):
            path = _model_path(name, version, "logs")
            found: list[str] = self.request_json("GET", path, params={"lines": lines})["lines"]
        return found

    @contextmanager
    def naming(self, name: str) -> Iterator[None]:
        """A 404 raised in the block for a model `name` that is not served gets the close
        names of the served models as its `hint` ("did you mean mnistnb?")."""
        try:
            yield
        except ServeClientError as error:
            if error.status == 404 and not error.hint:
                error.hint = self._did_you_mean(name)
            raise

    def _did_you_mean(self, name: str) -> str:
        try:
            served = [model["modelName"] for model in self.list_models()]
        except (ServeClientError, OSError, ValueError, KeyError):
            return ""
        close = [] if name in served else difflib.get_close_matches(name, served, n=3)
        return f"did you mean {' or '.join(close)}?" if close else ""

    def predict(
        self,
        name: str,
        body: bytes | str | Any,
        *,
        version: str | None = None,
        content_type: str | None = None,
        explain: bool = False,
    ) -> Response:
        """POST to predictions (or explanations); str goes as text, other objects as JSON."""
        data, kind = _encode_body(body, content_type)
        route = "explanations" if explain else "predictions"
        with self.naming(name):
            return self.request(
                "POST", _model_path(name, version, route), body=data, content_type=kind
            )

    # ---- inference keys (jupyter_serve's own routes) -------------------------

    def list_keys(self) -> list[dict[str, Any]]:
        """Every inference key: id, name, models (None: all), created; never a secret."""
        keys: list[dict[str, Any]] = self.request_json("GET", "keys")["keys"]
        return keys

    def create_key(self, name: str = "", models: Iterable[str] | None = None) -> dict[str, Any]:
        """Mint a key that may only run `models` (None: every model).

        Returns:
            The key's fields and, under "key", the secret: the only time it is shown.
        """
        fields = {"name": name, "models": list(models) if models is not None else None}
        data, kind = _encode_body(fields, None)
        minted: dict[str, Any] = self.request_json("POST", "keys", body=data, content_type=kind)
        return minted

    def revoke_key(self, key_id: str) -> dict[str, Any]:
        """Revoke a key at once (`ServeClientError` 404 for an unknown id)."""
        path = "keys/" + urllib.parse.quote(key_id, safe="")
        result: dict[str, Any] = self.request_json("DELETE", path)
        return result

    def metrics(self, names: Iterable[str] = ()) -> str:
        query = "&".join(f"name[]={urllib.parse.quote(n)}" for n in names)
        return self.request("GET", "metrics" + (f"?{query}" if query else "")).body.decode()


def local_archive(url: str) -> Path | None:
    """The absolute path of `url` when it names an existing file of this machine (relative
    to the working directory, or absolute), else None: a store name or a url goes to the
    server unchanged. A folder raises `NotAnArchive`."""
    if "://" in url:
        return None
    path = Path(url).expanduser()
    if path.is_dir():
        raise NotAnArchive(
            f"{url} is a folder: build an archive of it first (`%mar build`, or "
            "jupyter-serve-archiver) and register the .mar file"
        )
    return path.resolve() if path.is_file() else None


def _model_path(name: str, version: str | None, route: str = "models") -> str:
    parts = [route, urllib.parse.quote(name, safe="")]
    if version:
        parts.append(urllib.parse.quote(version, safe=""))
    return "/".join(parts)


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _encode_body(body: Any, content_type: str | None) -> tuple[bytes, str]:
    if isinstance(body, (bytes, bytearray)):
        return bytes(body), content_type or "application/octet-stream"
    if isinstance(body, str):
        return body.encode("utf-8"), content_type or "text/plain; charset=utf-8"
    return json.dumps(body).encode("utf-8"), content_type or "application/json"


def client_error(status: int, body: bytes) -> ServeClientError:
    """The `ServeClientError` of an error answer (TorchServe's JSON, else its text)."""
    try:
        data = json.loads(body)
    except ValueError:
        return ServeClientError(status, "HTTPError", body.decode("utf-8", "replace")[:500])
    if isinstance(data, dict) and isinstance(data.get("error"), dict):  # OpenAI's error object
        error = data["error"]
        return ServeClientError(status, str(error.get("type", "")), str(error.get("message")))
    if isinstance(data, dict) and "message" in data:
        cause = data.get("cause")
        message = str(data["message"])
        return ServeClientError(status, str(data.get("type", "")), message, cause and str(cause))
    return ServeClientError(status, "HTTPError", str(data)[:500])


def discover(url: str | None = None, token: str | None = None, **options: Any) -> ServerInfo:
    """The Jupyter server to talk to (`discovery.discover`, its options), asking each
    running server for its kernels through `ServeClient` when a `kernel_id` is given."""
    return discovery.discover(url, token, kernels=kernel_ids, **options)


def kernel_ids(server: ServerInfo) -> set[str]:
    """The ids of `server`'s kernels (none when it does not answer in 2 s)."""
    try:
        kernels = ServeClient(server, timeout=2).request_json("GET", "../api/kernels")
    except (OSError, ServeClientError, ValueError):
        return set()
    return {str(k.get("id")) for k in kernels if isinstance(k, dict)}
