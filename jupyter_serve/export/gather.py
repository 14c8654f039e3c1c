"""Where an export's items come from: a running server, or a snapshot file.

* `from_server(client, models)`: the server's models (`GET models`, every page), each
  version's settings from `GET models/{m}/all` (the default one from `GET models/{m}`),
  its archive streamed from `GET models/{m}/{v}/archive` (server/http/archives.py);
* `from_snapshot(path, model_store, models)`: a snapshot file (`<workdir>/snapshot.json`)
  and the files it names: an archive still holding the version is copied, a folder or an
  archive of other content is packed anew (archive/repack.py), a missing one is left out.

`models` picks names (None: every model); a name that is not there is a `Skipped`.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyter_serve.archive import Manifest, holds_version, read_manifest, repack, running_manifest
from jupyter_serve.archive.extract import inspect_archive
from jupyter_serve.export.plan import ExportItem, NotExported, Skipped
from jupyter_serve.kernel.client import ServeClient, ServeClientError, client_error
from jupyter_serve.server.registry.snapshot import SnapshotItem, read_snapshot
from jupyter_serve.wire.errors import ServeError

__all__ = ["download_archive", "from_server", "from_snapshot"]

CHUNK = 1 << 20
Gathered = tuple[list[ExportItem], list[Skipped]]


def from_server(client: ServeClient, models: Sequence[str] | None = None) -> Gathered:
    """The chosen models of the server `client` talks to (module docstring)."""
    names = _server_names(client)
    items: list[ExportItem] = []
    skipped = [Skipped(name, "", "not registered") for name in models or () if name not in names]
    for name in [name for name in names if models is None or name in models]:
        default = client.describe(name)[0]["modelVersion"]
        for described in client.describe(name, "all"):
            items.append(_item_of(client, described, default))
    return items, skipped


def _server_names(client: ServeClient) -> list[str]:
    names: list[str] = []
    token: str | None = "0"
    while token is not None:
        page = client.request_json("GET", "models", params={"next_page_token": token})
        names += [entry["modelName"] for entry in page["models"]]
        token = page.get("nextPageToken")
    return names


def _item_of(client: ServeClient, described: dict[str, Any], default: str) -> ExportItem:
    name, version = described["modelName"], described["modelVersion"]
    memory = [int(w.get("memoryUsage") or 0) for w in described.get("workers", [])]

    def fetch(target: Path) -> None:
        download_archive(client, name, version, target)

    return ExportItem(
        name=name, version=version, default=version == default, fetch=fetch,
        min_workers=described["minWorkers"], max_workers=described["maxWorkers"],
        batch_size=described["batchSize"], max_batch_delay_ms=described["maxBatchDelay"],
        response_timeout=described["responseTimeout"],
        startup_timeout=described["startupTimeout"], runtime=described.get("runtime", "python"),
        device_type=described.get("deviceType", "cpu"),
        device_ids=tuple(described.get("deviceIds") or ()),
        worker_memory=max(memory) if any(memory) else None,
    )  # fmt: skip


def download_archive(client: ServeClient, name: str, version: str, target: Path) -> None:
    """Stream `GET models/{name}/{version}/archive` into `target`.

    Raises:
        NotExported: the server refused it (its message), or the answer broke off.
    """
    quoted = "/".join(urllib.parse.quote(part, safe="") for part in (name, version))
    url = urllib.parse.urljoin(client.server.serve_url, f"models/{quoted}/archive")
    request = urllib.request.Request(url)
    if client.server.token:
        request.add_header("Authorization", f"token {client.server.token}")
    try:
        with (
            urllib.request.urlopen(request, timeout=client.timeout) as answer,
            target.open("wb") as out,
        ):
            shutil.copyfileobj(answer, out, CHUNK)
    except urllib.error.HTTPError as error:
        failure: ServeClientError = client_error(error.code, error.read())
        raise NotExported(f"the server refused its archive: {failure.message}") from None
    except (OSError, urllib.error.URLError) as error:
        raise NotExported(f"downloading its archive failed: {error}") from None


def from_snapshot(path: Path, model_store: Path, models: Sequence[str] | None = None) -> Gathered:
    """The chosen models of the snapshot file `path` (module docstring).

    Raises:
        OSError, ValueError: the file cannot be read or is no snapshot.
    """
    chosen = [item for item in read_snapshot(path) if models is None or item.name in models]
    found = {item.name for item in chosen}
    missing = [name for name in models or () if name not in found]
    skipped = [Skipped(name, "", "not in the snapshot") for name in missing]
    return [_snapshot_item(item, model_store) for item in chosen], skipped


def _snapshot_item(item: SnapshotItem, model_store: Path) -> ExportItem:
    entry = item.entry
    extra: dict[str, Any] = entry.get("jupyterServe") or {}
    extra = extra if isinstance(extra, dict) else {}
    source = Path(item.url) if Path(item.url).is_absolute() else model_store / item.url
    handler = str(extra.get("handler") or "")

    def fetch(target: Path) -> None:
        copy_or_repack(source, target, item.name, item.version, handler)

    return ExportItem(
        name=item.name, version=item.version, default=item.default, fetch=fetch,
        min_workers=item.min_workers, max_workers=item.max_workers,
        batch_size=int(entry.get("batchSize") or 1),
        max_batch_delay_ms=int(entry.get("maxBatchDelay", 100)),
        response_timeout=int(entry.get("responseTimeout", 120)),
        startup_timeout=int(entry.get("startupTimeout", 120)),
        runtime=str(entry.get("runtimeType") or "python"),
        device_type=str(extra.get("deviceType") or "cpu"),
        device_ids=tuple(extra.get("deviceIds") or ()),
    )  # fmt: skip


def copy_or_repack(source: Path, target: Path, name: str, version: str, handler: str) -> None:
    """`source` copied to `target` when it holds the version, else packed anew.

    Raises:
        NotExported: its files are gone, or cannot be read.
    """
    if not source.exists():
        raise NotExported(f"its files are gone: {source}")
    manifest = _manifest_of(source)
    handler = handler or manifest.model.handler or ""
    if holds_version(source, version, handler):
        shutil.copyfile(source, target)
        return
    try:
        repack(source, target, running_manifest(manifest, name, version, handler))
    except (OSError, ServeError) as error:
        raise NotExported(f"its files cannot be packed: {error}") from None


def _manifest_of(source: Path) -> Manifest:
    try:
        found = read_manifest(source) if source.is_dir() else inspect_archive(source).manifest
    except (OSError, ValueError, ServeError) as error:
        raise NotExported(f"its archive cannot be read: {error}") from None
    return found or Manifest.default_for(source)
