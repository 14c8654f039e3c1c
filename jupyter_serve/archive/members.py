"""What an archive member may be: a safe relative name, a bounded tar header, a name in a message.

Shared by `extract` (which writes members) and `listing` (which only reads the
manifest and the file list). Standard library only.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Protocol

from jupyter_serve.wire.errors import UnsafeArchive

__all__ = ["MAX_HEADER_BYTES", "open_tar", "safe_member_path", "shown"]

_SHOWN = 80  # characters of a member name an error message repeats
MAX_HEADER_BYTES = 64 * 1024  # a tar long-name / long-link / pax record


def shown(name: object) -> str:
    """A member name for a message: repr'd, and cut to `_SHOWN` characters."""
    text = repr(str(name))
    return text if len(text) <= _SHOWN else text[: _SHOWN - 4] + "...'"


def safe_member_path(name: str) -> PurePosixPath:
    """The relative path an archive member may be written to, or `UnsafeArchive`."""
    cleaned = name.replace("\\", "/")
    path = PurePosixPath(cleaned)
    if "\x00" in cleaned or path.is_absolute() or (path.parts and ":" in path.parts[0]):
        raise UnsafeArchive(f"Archive member has an absolute path: {shown(name)}")
    if ".." in path.parts:
        raise UnsafeArchive(f"Archive member leaves the target folder: {shown(name)}")
    parts = [part for part in path.parts if part not in ("", ".")]
    return PurePosixPath(*parts) if parts else PurePosixPath()


class _Readable(Protocol):
    """A binary file tarfile can read: the archive itself or a decompressor over it."""

    def read(self, size: int = -1, /) -> bytes: ...

    def seek(self, offset: int, whence: int = io.SEEK_SET, /) -> int: ...

    def tell(self) -> int: ...

    def close(self) -> None: ...


class _HeaderReads:
    """The archive's (decompressed) bytes as tarfile reads them, refusing any read over
    `MAX_HEADER_BYTES` while a member's headers are read: a long-name, long-link or pax
    record is read in one call of its declared size, so an oversized one is refused
    before tarfile allocates it. Member data is read in chunks, with no such limit."""

    def __init__(self, raw: _Readable, name: str) -> None:
        self.raw = raw
        self.name = name
        self.reading_headers = True

    def read(self, size: int = -1) -> bytes:
        if self.reading_headers and not 0 <= size <= MAX_HEADER_BYTES:
            raise UnsafeArchive(
                f"Archive has a {size}-byte name, link or pax record; the limit is "
                f"{MAX_HEADER_BYTES} bytes."
            )
        return self.raw.read(size)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def close(self) -> None:
        self.raw.close()


class _BoundedTarFile(tarfile.TarFile):
    """A tar archive read through `_HeaderReads`: headers bounded, data not (`next` is
    tarfile's public step to the next member, which iteration and `getmembers` take)."""

    def __init__(self, reads: _HeaderReads) -> None:
        self.header_reads = reads  # before tarfile's constructor reads the first member
        super().__init__(fileobj=reads)  # type: ignore[arg-type]

    def next(self) -> tarfile.TarInfo | None:
        self.header_reads.reading_headers = True
        try:
            return super().next()
        finally:
            self.header_reads.reading_headers = False

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.header_reads.close()  # tarfile leaves a fileobj it was given open

    def __exit__(self, *exc_info: object) -> None:
        self.close()  # on an error too, where tarfile's own exit closes nothing it was given


_NOT_A_TAR = (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError)


def open_tar(path: Path) -> tarfile.TarFile | None:
    """`path` opened as a (gzip, bzip2, xz or plain) tar with bounded headers, or None if it
    is none; an oversized first header raises `UnsafeArchive`."""
    reads = _HeaderReads(_decompressed(path), str(path))
    try:
        return _BoundedTarFile(reads)
    except _NOT_A_TAR:
        reads.close()
        return None
    except BaseException:
        reads.close()
        raise


def _decompressed(path: Path) -> _Readable:
    """`path`'s bytes through the decompressor its magic number names (none: as they are)."""
    with path.open("rb") as probe:
        magic = probe.read(6)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(path, "rb")
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(path, "rb")
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(path, "rb")
    return path.open("rb")
