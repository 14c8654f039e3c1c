"""Safe extraction and inspection of model archives (`.mar` zips, `.tar.gz`, folders).

`extract_mar(source, dest)` never writes outside `dest`:

* member names that are absolute, carry a drive, contain `..` or NUL are refused;
* symbolic links are created only when their target stays inside `dest`;
  hard links only to members already extracted; devices and FIFOs are refused;
* the file count and the bytes actually written are capped (`ExtractLimits`),
  counted while streaming, so a zip bomb with lying headers is stopped too;
* everything is unpacked into a temporary folder beside `dest` and renamed into
  place at the end: a refused archive leaves nothing behind.

Refusals raise `UnsafeArchive`; unreadable archives raise `ArchiveError`.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from ..errors import ArchiveError, UnsafeArchive
from .manifest import MANIFEST_PATH, Manifest

_CHUNK = 1 << 20


@dataclass(frozen=True)
class ExtractLimits:
    """Caps against zip bombs; generous enough for multi-GB model weights."""

    max_files: int = 100_000
    max_total_bytes: int = 64 * 1024**3


@dataclass(frozen=True)
class ArchiveListing:
    """What `inspect_archive` found: the manifest and (name, size) of each file."""

    manifest: Manifest | None
    files: list[tuple[str, int]]


def extract_mar(
    source: str | Path, dest: str | Path, *, limits: ExtractLimits | None = None
) -> Path:
    """Unpack the archive `source` into the new folder `dest`; return the model folder.

    The model folder is `dest` itself, or for a `tgz` archive (whose files sit
    under one top folder) that folder.
    """
    src, target = Path(source), Path(dest)
    if target.exists():
        raise ArchiveError(f"Extraction target already exists: {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _Extractor(staging, limits or ExtractLimits()).extract(src)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return model_root(target)


def model_root(folder: Path) -> Path:
    """`folder`, or its single subfolder when that holds the manifest (the tgz layout)."""
    if (folder / MANIFEST_PATH).is_file():
        return folder
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return folder


def safe_member_path(name: str) -> PurePosixPath:
    """The relative path an archive member may be written to, or `UnsafeArchive`."""
    cleaned = name.replace("\\", "/")
    path = PurePosixPath(cleaned)
    if "\x00" in cleaned or path.is_absolute() or (path.parts and ":" in path.parts[0]):
        raise UnsafeArchive(f"Archive member has an absolute path: {name!r}")
    if ".." in path.parts:
        raise UnsafeArchive(f"Archive member leaves the target folder: {name!r}")
    parts = [part for part in path.parts if part not in ("", ".")]
    return PurePosixPath(*parts) if parts else PurePosixPath()


class _Extractor:
    """Writes members below `root`, enforcing the limits and the path rules."""

    def __init__(self, root: Path, limits: ExtractLimits) -> None:
        self.root = root
        self.real_root = os.path.realpath(root)
        self.limits = limits
        self.files = 0
        self.bytes = 0

    def extract(self, source: Path) -> None:
        if not source.is_file():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(source))
        if zipfile.is_zipfile(source):
            with zipfile.ZipFile(source) as zf:
                self._extract_zip(zf)
        elif _is_tarfile(source):
            with tarfile.open(source, "r:*") as tar:
                self._extract_tar(tar)
        else:
            raise ArchiveError(f"Not a model archive (zip or tar.gz): {source.name}")

    def _extract_zip(self, zf: zipfile.ZipFile) -> None:
        for info in zf.infolist():
            relative = safe_member_path(info.filename)
            mode = info.external_attr >> 16
            if info.is_dir():
                self._directory(relative)
            elif stat.S_ISLNK(mode):
                self._symlink(relative, zf.read(info).decode("utf-8"))
            else:
                with zf.open(info) as stream:
                    self._file(relative, stream, mode & 0o755)

    def _extract_tar(self, tar: tarfile.TarFile) -> None:
        for member in tar:
            relative = safe_member_path(member.name)
            if member.isdir():
                self._directory(relative)
            elif member.issym():
                self._symlink(relative, member.linkname)
            elif member.islnk():
                self._hardlink(relative, safe_member_path(member.linkname))
            elif member.isreg():
                stream = tar.extractfile(member)
                assert stream is not None  # a regular member always has data
                with stream:
                    self._file(relative, stream, member.mode & 0o755)
            else:
                raise UnsafeArchive(f"Archive member is not a file or folder: {member.name!r}")

    def _count_file(self) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise UnsafeArchive(
                f"Archive holds more than {self.limits.max_files} files; refusing to extract."
            )

    def _inside(self, relative: PurePosixPath) -> Path:
        """The destination of `relative`, after checking links on the way stay inside."""
        path = self.root.joinpath(*relative.parts)
        real = os.path.realpath(path)
        if real != self.real_root and not real.startswith(self.real_root + os.sep):
            raise UnsafeArchive(f"Archive member leaves the target folder: {relative}")
        return path

    def _directory(self, relative: PurePosixPath) -> None:
        self._inside(relative).mkdir(parents=True, exist_ok=True)

    def _file(self, relative: PurePosixPath, stream: IO[bytes], mode: int) -> None:
        self._count_file()
        path = self._inside(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._inside(relative)  # parents may be links created by earlier members
        with open(path, "wb") as out:
            for chunk in iter(lambda: stream.read(_CHUNK), b""):
                self.bytes += len(chunk)
                if self.bytes > self.limits.max_total_bytes:
                    raise UnsafeArchive(
                        "Archive expands past "
                        f"{self.limits.max_total_bytes} bytes; refusing to extract."
                    )
                out.write(chunk)
        os.chmod(path, (mode or 0o644) | 0o600)

    def _symlink(self, relative: PurePosixPath, target: str) -> None:
        self._count_file()
        link = self._inside(relative)
        if os.path.isabs(target):
            raise UnsafeArchive(f"Archive link {relative} points outside: {target!r}")
        resolved = os.path.realpath(link.parent / target)
        if resolved != self.real_root and not resolved.startswith(self.real_root + os.sep):
            raise UnsafeArchive(f"Archive link {relative} points outside: {target!r}")
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, link)

    def _hardlink(self, relative: PurePosixPath, target: PurePosixPath) -> None:
        self._count_file()
        source = self._inside(target)
        if not source.is_file():
            raise UnsafeArchive(f"Archive hard link {relative} has no extracted target.")
        destination = self._inside(relative)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)


def _is_tarfile(path: Path) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except OSError:
        return False


def inspect_archive(source: str | Path) -> ArchiveListing:
    """Read an archive's manifest and file list without extracting it."""
    src = Path(source)
    if not src.exists():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(src))
    if src.is_dir():
        files = [(p.relative_to(src).as_posix(), p.stat().st_size) for p in _walk(src)]
        return ArchiveListing(_find_manifest(files, lambda n: (src / n).read_bytes()), files)
    if zipfile.is_zipfile(src):
        with zipfile.ZipFile(src) as zf:
            names = [(i.filename, i.file_size) for i in zf.infolist() if not i.is_dir()]
            return ArchiveListing(_find_manifest(names, zf.read), names)
    if _is_tarfile(src):
        with tarfile.open(src, "r:*") as tar:
            members = {m.name: m for m in tar.getmembers() if m.isfile()}

            def read(name: str) -> bytes:
                stream = tar.extractfile(members[name])
                return stream.read() if stream else b""

            names = [(name, m.size) for name, m in members.items()]
            return ArchiveListing(_find_manifest(names, read), names)
    raise ArchiveError(f"Not a model archive (zip, tar.gz or folder): {src}")


def _walk(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            yield path


def _find_manifest(files: list[tuple[str, int]], read: Callable[[str], bytes]) -> Manifest | None:
    for name, _size in files:
        if name == MANIFEST_PATH or name.endswith("/" + MANIFEST_PATH):
            return Manifest.from_json(read(name))
    return None
