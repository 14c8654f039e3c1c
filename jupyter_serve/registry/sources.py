"""Where a register `url` points: a file or folder in the model store, a local path, a download.

TorchServe's rules and messages (contract §1.6):

* an empty url is `ModelNotFound("empty url")`;
* a url with a `..` part is `ModelNotFound("Relative path is not allowed in url: ...")`;
* an `http(s)://` url must match one of the `allowed_urls` regexes, else
  `ModelNotFound("Given URL X does not match any allowed URL(s)")`; it is then
  downloaded into the model store (failures: `DownloadArchive`, 400);
* `file://` urls and absolute paths are used as they are; anything else is a
  name in the model store, `ModelNotFound("Model not found in model store: x.mar")`
  when it is missing.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import DownloadArchive, ModelNotFound, ServeError

__all__ = ["DOWNLOAD_TIMEOUT", "Source", "archive_stem", "locate"]

DOWNLOAD_TIMEOUT = 60.0  # seconds without progress before a download fails
_SUFFIXES = (".tar.gz", ".tgz", ".mar", ".zip")


@dataclass(frozen=True)
class Source:
    """A located model: its path, and the file we downloaded for it (removed on unregister)."""

    path: Path
    downloaded: Path | None = None

    @property
    def is_folder(self) -> bool:
        return self.path.is_dir()


def archive_stem(path: Path) -> str:
    """`x` for `x.mar`, `x.tar.gz`, `x.tgz`, `x.zip`, or a folder `x`."""
    name = path.name
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


async def locate(url: str, model_store: Path, allowed_urls: Sequence[str] = ()) -> Source:
    """The model `url` names, downloading http(s) urls into `model_store` first."""
    if not url:
        raise ModelNotFound("empty url")
    if ".." in PurePosixPath(url.replace("\\", "/")).parts:
        raise ModelNotFound(f"Relative path is not allowed in url: {url}")
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        _check_allowed(url, allowed_urls)
        return await asyncio.to_thread(_download, url, model_store)
    if scheme == "file":
        path = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
    else:
        path = Path(url) if Path(url).is_absolute() else model_store / url
    if not path.exists():
        raise ModelNotFound(f"Model not found in model store: {url}")
    return Source(path)


def _check_allowed(url: str, allowed_urls: Sequence[str]) -> None:
    if not any(re.fullmatch(pattern, url) for pattern in allowed_urls):
        raise ModelNotFound(f"Given URL {url} does not match any allowed URL(s)")


def _download(url: str, model_store: Path) -> Source:
    """Fetch `url` to `model_store/<its file name>` through a temporary file."""
    failed = DownloadArchive(f"Failed to download archive from: {url}")
    name = PurePosixPath(urllib.parse.urlsplit(url).path).name
    if not name:
        raise failed
    target = model_store / name
    if target.exists():
        raise ServeError(f"Model file already exists {name}")
    model_store.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", dir=model_store)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as r:
            shutil.copyfileobj(r, out)
        os.replace(temp, target)
    except (OSError, ValueError, http.client.HTTPException, urllib.error.URLError) as exc:
        Path(temp).unlink(missing_ok=True)
        if isinstance(exc, urllib.error.HTTPError):
            exc.close()  # it holds the response's socket
        raise failed from exc
    return Source(target, downloaded=target)
