"""`inspect_archive`: an archive's manifest and file list, read without extracting it.

The manifest is read only up to `MAX_MANIFEST_BYTES`, whatever size it declares,
and tar headers are bounded as in `extract`. Standard library only.
"""

from __future__ import annotations

import errno
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from jupyter_serve.archive.manifest import MANIFEST_PATH, MAX_MANIFEST_BYTES, Manifest
from jupyter_serve.archive.members import open_tar, shown
from jupyter_serve.wire.errors import ArchiveError

__all__ = ["ArchiveListing", "inspect_archive"]


@dataclass(frozen=True)
class ArchiveListing:
    """What `inspect_archive` found: the manifest and (name, size) of each file."""

    manifest: Manifest | None
    files: list[tuple[str, int]]


def inspect_archive(source: str | Path) -> ArchiveListing:
    """Read an archive's manifest and file list without extracting it."""
    src = Path(source)
    if not src.exists():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(src))
    if src.is_dir():
        files = [(p.relative_to(src).as_posix(), p.stat().st_size) for p in _walk(src)]
        manifest = _find_manifest(files, lambda name: _read_capped((src / name).open("rb")))
        return ArchiveListing(manifest, files)
    if zipfile.is_zipfile(src):
        with zipfile.ZipFile(src) as zf:
            names = [(i.filename, i.file_size) for i in zf.infolist() if not i.is_dir()]
            manifest = _find_manifest(names, lambda name: _read_capped(zf.open(name)))
            return ArchiveListing(manifest, names)
    tar = open_tar(src)
    if tar is None:
        raise ArchiveError(f"Not a model archive (zip, tar.gz or folder): {shown(src.name)}")
    with tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}

        def read(name: str) -> bytes:
            stream = tar.extractfile(members[name])
            return _read_capped(stream) if stream else b""

        names = [(name, m.size) for name, m in members.items()]
        return ArchiveListing(_find_manifest(names, read), names)


def _read_capped(stream: IO[bytes]) -> bytes:
    """A manifest's bytes, refused past `MAX_MANIFEST_BYTES` whatever the size it declared."""
    with stream:
        data = stream.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ArchiveError(f"Invalid manifest: over {MAX_MANIFEST_BYTES} bytes.")
    return data


def _walk(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            yield path


def _find_manifest(files: list[tuple[str, int]], read: Callable[[str], bytes]) -> Manifest | None:
    for name, size in files:
        if name == MANIFEST_PATH or name.endswith("/" + MANIFEST_PATH):
            if size > MAX_MANIFEST_BYTES:
                raise ArchiveError(f"Invalid manifest: over {MAX_MANIFEST_BYTES} bytes.")
            return Manifest.from_json(read(name))
    return None
