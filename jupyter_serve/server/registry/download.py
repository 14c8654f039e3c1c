"""Downloading an `allowed_urls` archive into the model store, hop by hop and byte by byte.

* `check_allowed(url, patterns)`: an http(s) url whose path, percent-decoded,
  has no `..` segment (CVE-2024-35198's pattern) and whose decoded form fully
  matches one of the regexes; else TorchServe's
  `ModelNotFound("Given URL X does not match any allowed URL(s)")`.
* `download(url, model_store, max_bytes)`: urllib with a redirect handler that
  runs `check_allowed` on every `Location` before following it, and a byte
  count kept while streaming, so a missing or lying `Content-Length` cannot
  push past `max_bytes`. The file arrives through a temporary file that is
  removed on any failure (`DownloadArchive`, 400).
"""

from __future__ import annotations

import http.client
import os
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import IO, Any

from jupyter_serve.server.registry.names import name_problem, twin_in
from jupyter_serve.wire.errors import DownloadArchive, ModelNotFound, ServeError

__all__ = ["DOWNLOAD_TIMEOUT", "check_allowed", "download"]

DOWNLOAD_TIMEOUT = 60.0  # seconds without progress before a download fails
_CHUNK = 1 << 20
_SHOWN = 500  # characters of a url an error message repeats


def check_allowed(url: str, patterns: Sequence[str]) -> None:
    """Refuse `url` unless it is http(s), has no decoded `..` and matches a pattern."""
    shown = url if len(url) <= _SHOWN else url[:_SHOWN] + "..."  # a redirect's Location
    refused = ModelNotFound(f"Given URL {shown} does not match any allowed URL(s)")
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # a redirect to a url that does not parse
        raise refused from None
    if parts.scheme.lower() not in ("http", "https"):
        raise refused
    path = urllib.parse.unquote(parts.path)
    if ".." in PurePosixPath(path.replace("\\", "/")).parts:
        raise refused
    decoded = urllib.parse.urlunsplit(parts._replace(path=path))
    if not any(re.fullmatch(pattern, decoded) for pattern in patterns):
        raise refused


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to a url the allow-list accepts."""

    def __init__(self, patterns: Sequence[str]) -> None:
        super().__init__()
        self.patterns = patterns

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        try:
            check_allowed(newurl, self.patterns)
        except ModelNotFound:
            fp.close()  # the redirect response and its socket
            raise
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def download(url: str, model_store: Path, patterns: Sequence[str], max_bytes: int) -> Path:
    """Fetch `url` to `model_store/<its file name>`; `max_bytes` 0 means no cap."""
    failed = DownloadArchive(f"Failed to download archive from: {url}")
    name = PurePosixPath(urllib.parse.urlsplit(url).path).name  # as TorchServe: not decoded
    if not name or name.startswith(".") or "\x00" in name:
        raise failed
    problem = name_problem(name) or ("it looks like another file" if twin_in(model_store, name)
                                     else None)  # fmt: skip
    if problem:
        raise DownloadArchive(f"Failed to download archive from: {url}: {problem}.")
    target = model_store / name
    if target.exists():
        raise ServeError(f"Model file already exists {name}")
    model_store.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", dir=model_store)
    opener = urllib.request.build_opener(_CheckedRedirects(patterns))
    try:
        with os.fdopen(fd, "wb") as out, opener.open(url, timeout=DOWNLOAD_TIMEOUT) as response:
            _copy_capped(response, out, max_bytes, url)
        os.replace(temp, target)
    except BaseException as exc:
        Path(temp).unlink(missing_ok=True)
        if isinstance(exc, urllib.error.HTTPError):
            exc.close()  # it holds the response's socket
        if isinstance(exc, (OSError, ValueError, http.client.HTTPException)):
            raise failed from exc
        raise
    return target


def _copy_capped(response: Any, out: IO[bytes], max_bytes: int, url: str) -> None:
    """Stream `response` into `out`, refusing more than `max_bytes` (whatever it announced)."""
    too_big = DownloadArchive(
        f"Failed to download archive from: {url}: larger than max_download_size ({max_bytes} bytes)"
    )
    announced = response.headers.get("Content-Length", "")
    if max_bytes and announced.isdigit() and int(announced) > max_bytes:
        raise too_big
    received = 0
    for chunk in iter(lambda: response.read(_CHUNK), b""):
        received += len(chunk)
        if max_bytes and received > max_bytes:
            raise too_big
        out.write(chunk)
