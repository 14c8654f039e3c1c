"""`PUT model-store/{file}`: an archive sent in the body, saved into the model store.

jupyter_serve's own route (TorchServe has none): how a kernel registers an archive
it built when the server cannot read the kernel's disk (`%serve connect` to another
machine, a relative path of the notebook's folder). The client uploads the file,
then registers it by its store name (`POST models?url=x.mar`).

* the name is a plain file name ending in ``.mar``, ``.tar.gz``, ``.tgz`` or ``.zip``
  (no path separator, no ``..``, at most 200 bytes in UTF-8), and one that shows as
  what it is (server/registry/names.py: no control or format character such as U+202E,
  no leading ``-``), else 400 `BadRequestException`; it is saved in Unicode NFC;
* a name whose NFC form is that of an entry of the store spelled differently (``é``
  composed or not) answers 409 `ConflictStatusException`, ``overwrite`` or not: the
  request is sound, but would make two files no one can tell apart; so does a name
  that is a folder model of the store, which no archive replaces;
* the raw body is the archive, streamed to a hidden temporary file in the store
  (never held in memory) and moved into place at the end, so no one ever sees half
  an archive; a body over `ServeApp.max_download_size` (0: no cap) answers 413;
* a name already in the store answers 409 `ConflictStatusException` unless
  ``?overwrite=true``, or unless the stored file has the very same bytes (an
  unchanged archive sent again: 200);
* 201 `{"status", "url"}` for a new file, 200 when replaced or unchanged.

Authorization (`write`) is asked in `prepare`, before a byte is written, and again
by the verb, as on every route. With `ServeApp.enable_model_api` off it answers 405.
"""

from __future__ import annotations

import asyncio
import filecmp
import os
import re
import tempfile
from pathlib import Path
from typing import IO, Any

from tornado import web

from jupyter_serve.server.http.access import WRITE, allow
from jupyter_serve.server.http.management import ManagementRoute
from jupyter_serve.server.http.params import bool_arg
from jupyter_serve.server.registry.names import name_problem, nfc, twin_in
from jupyter_serve.server.registry.sources import ARCHIVE_SUFFIXES
from jupyter_serve.wire.errors import BadRequest, ConflictStatus, RequestTooLarge, ServeError

MAX_NAME = 200
_NAME = re.compile(r"[^/\\]+")  # control characters: `name_problem`
NO_LIMIT = 2**62  # tornado's body limit when `max_download_size` is 0


def check_store_name(name: str) -> str:
    """`name` in NFC when it is a plain archive file name, else 400 (module docstring)."""
    problem = name_problem(name)
    if problem:
        raise BadRequest(f"Invalid archive name {name[:MAX_NAME]!r}: {problem}.")
    name = nfc(name)
    plain = _NAME.fullmatch(name) and ".." not in name and not name.startswith(".")
    stem_ok = any(name.endswith(s) and len(name) > len(s) for s in ARCHIVE_SUFFIXES)
    if not (plain and stem_ok and len(name.encode("utf-8", "replace")) <= MAX_NAME):
        raise BadRequest(
            f"Invalid archive name {name[:MAX_NAME]!r}: expected a plain file name ending in "
            f".mar, .tar.gz, .tgz or .zip, of at most {MAX_NAME} bytes (UTF-8)."
        )
    return name


def check_target(target: Path) -> None:
    """409 when `target` is a folder model, or the twin of another entry (module docstring)."""
    if target.is_dir():
        raise ConflictStatus(
            f"{target.name} is a model folder in the model store; an archive cannot replace "
            "it. Unregister it and remove the folder first, or choose another name."
        )
    twin = twin_in(target.parent, target.name)
    if twin is not None:
        raise ConflictStatus(
            f"Archive {target.name} would look the same as {twin!r} in the model store "
            "(the same name in another Unicode normalisation); remove or rename that file, "
            "or choose another name."
        )


class Upload:
    """One archive being received: a hidden temporary file in the store, then the file."""

    def __init__(self, target: Path, limit: int) -> None:
        self.target, self.limit, self.size = target, limit, 0
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
        self.temp = Path(temp)
        self.file: IO[bytes] = os.fdopen(fd, "wb")

    @property
    def too_large(self) -> bool:
        return bool(self.limit) and self.size > self.limit

    def write(self, chunk: bytes) -> None:
        """Append `chunk`; past the limit the rest is counted and dropped."""
        self.size += len(chunk)
        if not self.too_large:
            self.file.write(chunk)

    def commit(self, overwrite: bool) -> str:
        """Move the file into place; "created", "replaced" or "unchanged" (409: other bytes)."""
        self.file.close()
        try:
            check_target(self.target)  # again: the store may have changed while receiving
            if overwrite:
                existed = self.target.exists()
                os.replace(self.temp, self.target)
                return "replaced" if existed else "created"
            return self._create()
        finally:
            self.discard()

    def _create(self) -> str:
        try:
            os.link(self.temp, self.target)  # atomic, and never over an existing file
        except FileExistsError:
            if filecmp.cmp(self.temp, self.target, shallow=False):
                return "unchanged"
            raise ConflictStatus(
                f"Archive {self.target.name} already exists in the model store with other "
                "content; send it with overwrite=true to replace it."
            ) from None
        return "created"

    def discard(self) -> None:
        """Close and remove the temporary file (nothing once committed)."""
        self.file.close()
        self.temp.unlink(missing_ok=True)


_SAID = {
    "created": "Archive {} saved in the model store.",
    "replaced": "Archive {} replaced in the model store.",
    "unchanged": "Archive {} is already in the model store, unchanged.",
}


@web.stream_request_body
class ModelStoreRoute(ManagementRoute):
    """`PUT model-store/{file}`: save the body as `{file}` in the model store."""

    upload: Upload | None = None

    @property
    def limit(self) -> int:
        """The largest body, `ServeApp.max_download_size` (0: no cap)."""
        return int(self.settings["serve_app"].max_download_size)

    def body_size_error(self) -> ServeError | None:
        announced = self.request.headers.get("Content-Length", "")
        if self.limit and announced.isdigit() and int(announced) > self.limit:
            return RequestTooLarge.over(self.limit)
        return None

    async def prepare(self) -> None:  # type: ignore[override]
        await super().prepare()
        if self.request.method == "PUT":
            await self.begin(*self.path_args)  # authorized: a coroutine

    @allow(WRITE)
    def begin(self, file_name: str) -> None:
        """Checked before the body is read: who asks, the model API, the name."""
        self.check_model_api()
        store = Path(self.settings["serve_app"].model_store)
        store.mkdir(parents=True, exist_ok=True)
        target = store / check_store_name(file_name)
        check_target(target)
        self.request.connection.set_max_body_size(self.limit or NO_LIMIT)  # type: ignore[union-attr]
        self.upload = Upload(target, self.limit)

    def data_received(self, chunk: bytes) -> None:
        if self.upload is not None:  # None: refused in prepare, the body is dropped
            self.upload.write(chunk)

    @allow(WRITE)
    async def put(self, file_name: str) -> None:
        upload = self.upload
        if upload is None:  # prepare always starts one for a PUT it lets through
            raise ServeError("No upload in progress.")
        if upload.too_large:
            raise RequestTooLarge.over(self.limit)
        overwrite = bool_arg(self.query(), "overwrite", False)
        outcome = await asyncio.to_thread(upload.commit, overwrite)
        name = upload.target.name  # NFC: the name to register it by
        answer = {"status": _SAID[outcome].format(name), "url": name}
        self.write_json(answer, 201 if outcome == "created" else 200)

    def on_finish(self) -> None:
        if self.upload is not None:
            self.upload.discard()

    def on_connection_close(self) -> None:
        super().on_connection_close()
        self.on_finish()


ROUTES: list[tuple[str, type[Any]]] = [
    (r"model-store/([^/]+)", ModelStoreRoute),
]
