"""What an archive member may be: a safe relative name, a bounded tar header, a name in a message.

Shared by `extract` (which writes members) and `listing` (which only reads the
manifest and the file list). Standard library only.
"""

from __future__ import annotations

import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import UnsafeArchive

__all__ = ["MAX_HEADER_BYTES", "open_tar", "safe_member_path", "shown"]

_SHOWN = 80  # characters of a member name an error message repeats
MAX_HEADER_BYTES = 64 * 1024  # a tar long-name / long-link / pax record
_HEADER_TYPES = (
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)


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


class _BoundedTarInfo(tarfile.TarInfo):
    """A tar header that refuses oversized long-name, long-link and pax records
    before tarfile reads them into memory (`_proc_member` is tarfile's hook)."""

    def _proc_member(self, tarfile: tarfile.TarFile) -> Any:
        if self.type in _HEADER_TYPES and self.size > MAX_HEADER_BYTES:
            raise UnsafeArchive(
                f"Archive has a {self.size}-byte name, link or pax record; the limit is "
                f"{MAX_HEADER_BYTES} bytes."
            )
        return super()._proc_member(tarfile)  # type: ignore[misc]


def open_tar(path: Path) -> tarfile.TarFile | None:
    """`path` opened as a (compressed) tar with bounded headers, or None if it is none."""
    try:
        return tarfile.open(path, "r:*", tarinfo=_BoundedTarInfo)
    except (tarfile.ReadError, tarfile.CompressionError):
        return None
