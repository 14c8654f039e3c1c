"""Where a register `url` points: a file or folder in the model store, a download, a local path.

TorchServe's rules and messages for a register url, made stricter where TorchServe
lets a client read the server's disk:

* an empty url is `ModelNotFound("empty url")`; one with a NUL is TorchServe's 403;
* a url holding any other character that is not a glyph (a control or format
  character such as U+202E) or starting with `-` is 400 `BadRequest`: the rule
  store names follow (`names.name_problem`), since the url is shown back as the
  model's `modelUrl`;
* a url with a `..` part, raw or percent-decoded, is
  `ModelNotFound("Relative path is not allowed in url: ...")`;
* an `http(s)://` url must pass `download.check_allowed` (the `allowed_urls`
  regexes), else `ModelNotFound("Given URL X does not match any allowed URL(s)")`;
  it is then downloaded into the model store (see `download`: every redirect
  checked, `max_download_size` counted while streaming);
* anything else that is not absolute is a name in the model store, found only
  when it resolves (symlinks included) inside the store, else
  `ModelNotFound("Model not found at: x.mar")`, TorchServe 0.12's own text;
* absolute paths and `file://` urls are confined to the model store and the
  `jupyter_serve_work` folders below `workspace_root` (the Jupyter server's
  root, which its contents API opens to the same clients anyway): the magics'
  work folders, where `%%handler --serve` and `%mar build` put archives (see
  `workspace`). Anything else is refused with one message whether or not it
  exists (TorchServe's "Model not found at: ..." with the reason as the error's
  `cause`), unless `allow_local_paths` restores TorchServe's "any local path".
"""

from __future__ import annotations

import asyncio
import os
import urllib.parse
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath

from jupyter_serve.archive.build import MAGICS_WORKDIR
from jupyter_serve.server.registry.download import DOWNLOAD_TIMEOUT, check_allowed, download
from jupyter_serve.server.registry.names import name_problem
from jupyter_serve.wire.errors import BadRequest, DownloadArchive, IllegalArgument, ModelNotFound

__all__ = [
    "ARCHIVE_SUFFIXES",
    "DOWNLOAD_TIMEOUT",
    "MAX_DOWNLOAD_SIZE",
    "Source",
    "SourcePolicy",
    "archive_stem",
    "locate",
]

MAX_DOWNLOAD_SIZE = 4 * 1024**3  # bytes; ServeApp.max_download_size says why
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".mar", ".zip")  # what a register url may end in
NUL_IN_URL = (  # TorchServe 0.12's words, with its 403
    "Null character present in file/path name. There are no known legitimate use cases for "
    "such data, but several injection attacks may use it"
)


@dataclass(frozen=True)
class SourcePolicy:
    """What a register url may name besides the model store's entries."""

    allowed_urls: tuple[str, ...] = ()
    max_download_size: int = MAX_DOWNLOAD_SIZE  # 0: no cap
    allow_local_paths: bool = False  # TorchServe's behaviour: any absolute path or file://
    workspace_root: Path | None = None  # its `jupyter_serve_work` folders are allowed

    @classmethod
    def of(cls, config: object) -> SourcePolicy:
        """The policy from the same-named attributes of `config` (a `RegistryConfig`)."""
        return cls(**{field.name: getattr(config, field.name) for field in fields(cls)})


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
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


async def locate(url: str, model_store: Path, policy: SourcePolicy | None = None) -> Source:
    """The model `url` names, downloading http(s) urls into `model_store` first."""
    policy = policy or SourcePolicy()
    if not url:
        raise ModelNotFound("empty url")
    if "\x00" in url:
        raise IllegalArgument(NUL_IN_URL)
    problem = name_problem(url)
    if problem:
        raise BadRequest(f"Invalid model url {url!r}: {problem}.")
    decoded = urllib.parse.unquote(url)
    if any(".." in PurePosixPath(text.replace("\\", "/")).parts for text in (url, decoded)):
        raise ModelNotFound(f"Relative path is not allowed in url: {url}")
    try:
        split = urllib.parse.urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket: TorchServe fails its download
        raise DownloadArchive(f"Failed to download archive from: {url}") from None
    if split.scheme.lower() in ("http", "https"):
        check_allowed(url, policy.allowed_urls)
        path = await asyncio.to_thread(
            download, url, model_store, policy.allowed_urls, policy.max_download_size
        )
        return Source(path, downloaded=path)
    if split.scheme.lower() == "file":
        return _local(url, Path(urllib.parse.unquote(split.path)), model_store, policy)
    if Path(url).is_absolute():
        return _local(url, Path(url), model_store, policy)
    return _in_store(url, model_store / url, model_store)


def _in_store(url: str, path: Path, model_store: Path) -> Source:
    """`path`, when it exists and resolves inside the model store."""
    if "\x00" in str(path) or not (_inside(path, model_store) and _exists(path)):
        raise _not_found(url)
    return Source(path)


def _local(url: str, path: Path, model_store: Path, policy: SourcePolicy) -> Source:
    """An absolute path: inside the store and the allowed folders, or anywhere if allowed."""
    if "\x00" in str(path):
        return _in_store(url, path, model_store)  # no such file anywhere
    if policy.allow_local_paths:
        if not _exists(path):
            raise _not_found(url)
        return Source(path)
    if _inside(path, model_store):
        return _in_store(url, path, model_store)
    if _in_work_folder(path, policy.workspace_root) and _exists(path):
        return Source(path)
    # One answer for what exists and what does not: no probing of the server's disk.
    raise _not_found(
        url, "local paths outside the model store are not allowed; see ServeApp.allow_local_paths"
    )


def _not_found(url: str, cause: str | None = None) -> ModelNotFound:
    """TorchServe's answer for a url naming nothing it can load (`ModelArchive.downloadModel`)."""
    return ModelNotFound(f"Model not found at: {url}", cause=cause)


def _exists(path: Path) -> bool:
    """Whether `path` is a file or a folder; False for anything else (a FIFO, a device,
    which the extraction could not read or would block on) and for a name the file
    system refuses (ENAMETOOLONG...)."""
    try:
        return path.is_file() or path.is_dir()
    except OSError:
        return False


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path`, symlinks resolved, is `folder` or below it."""
    real, base = os.path.realpath(path), os.path.realpath(folder)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def _in_work_folder(path: Path, root: Path | None) -> bool:
    """Whether `path` lies in a `jupyter_serve_work` folder below `root` (the magics')."""
    if root is None or not _inside(path, root):
        return False
    below = Path(os.path.realpath(path)).relative_to(os.path.realpath(root))
    return MAGICS_WORKDIR in below.parts[:-1]  # where the magics build (workspace.py)
