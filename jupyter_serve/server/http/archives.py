"""`GET models/{m}/{v}/archive`: the `.mar` a model version serves from, as a download.

jupyter_serve's own route (TorchServe has none), what `jupyter serve export` copies
into its model store: the archive the version was registered from, or one packed
from the folder it serves from (`registry.served`: folder models, `%%handler`
work folders, a handler overridden at register), streamed in 1 MiB chunks with
`Content-Disposition: attachment; filename="<m>.mar"`. A version whose files are
gone answers 404.

Authorization asks `write`: an archive is the model's code and weights, which go
only to those who may change what is served (and could register any code anyway).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, BinaryIO

from jupyter_serve.server.http.access import WRITE, allow
from jupyter_serve.server.http.management import ManagementRoute
from jupyter_serve.server.registry.served import served_archive

CHUNK = 1 << 20


class ModelArchiveRoute(ManagementRoute):
    """`GET models/{m}/{v}/archive`: the version's `.mar`."""

    guards_cookie_gets = True  # no cross-site link may fetch it with the cookie (base.py)

    @allow(WRITE)
    async def get(self, name: str, version: str) -> None:
        model = self.registry.get(name, version)
        served = await served_archive(model, self.registry.config)
        try:
            archive = served.path.open("rb")
        finally:
            if served.temporary:  # packed for us: gone at once, the open file stays readable
                served.path.unlink(missing_ok=True)
        with archive:
            await self._send(archive, f"{model.name}.mar")

    async def _send(self, archive: BinaryIO, file_name: str) -> None:
        self.set_header("Content-Type", "application/octet-stream")
        self.set_header("Content-Disposition", f'attachment; filename="{file_name}"')
        self.set_header("Content-Length", str(os.fstat(archive.fileno()).st_size))
        while chunk := await asyncio.to_thread(archive.read, CHUNK):
            self.write(chunk)
            await self.flush()
        self.finish()


ROUTES: list[tuple[str, type[Any]]] = [
    (r"models/([^/]+)/([^/]+)/archive/?", ModelArchiveRoute),
]
