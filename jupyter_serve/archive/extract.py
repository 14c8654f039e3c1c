"""Safe extraction of model archives (`.mar` zips, `.tar.gz`); `listing` inspects them.

`extract_mar(source, dest)` never writes outside `dest` and never trusts a size:

* member names that are absolute, carry a drive, contain `..` or NUL are refused;
* every member's size is checked before it is read: a declared size past the
  budget is refused at once, and bytes are counted while streaming too, so a
  zip bomb with lying headers stops as well. Link targets (`max_link_bytes`),
  the manifest (`max_manifest_bytes`) and a tar's long-name, long-link and pax
  records (`MAX_HEADER_BYTES`) are bounded before anything reads them;
* the expansion is capped (`ExtractLimits`): a number of members, a total that
  also fits the free disk space, and a ratio to the archive's own size;
* symbolic links must be relative and point inside `dest` when made; hard
  links are copies of members already extracted (and count as bytes); devices
  and FIFOs are refused. Once everything is written, every link of the final
  tree is checked again, as tarfile's `data` filter does, so a link that a
  later member made climb out is caught;
* everything is unpacked into a temporary folder beside `dest` and renamed into
  place at the end: a refused archive leaves nothing behind.

Refusals raise `UnsafeArchive`, unreadable archives `ArchiveError` (both 400).
Messages name members (truncated) but never repeat member content.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from jupyter_serve.archive.listing import ArchiveListing, inspect_archive
from jupyter_serve.archive.manifest import MANIFEST_PATH, MAX_MANIFEST_BYTES
from jupyter_serve.archive.members import MAX_HEADER_BYTES, open_tar, safe_member_path, shown
from jupyter_serve.wire.errors import ArchiveError, NotAnArchive, UnsafeArchive

__all__ = [
    "MAX_HEADER_BYTES",
    "ArchiveListing",  # re-exported from `listing`
    "ExtractLimits",
    "extract_mar",
    "inspect_archive",  # re-exported from `listing`
    "model_root",
    "safe_member_path",  # re-exported from `members`
]

_CHUNK = 1 << 20
_CORRUPT = (zipfile.BadZipFile, tarfile.TarError, zlib.error, EOFError, NotImplementedError)


@dataclass(frozen=True)
class ExtractLimits:
    """Caps against zip bombs; generous enough for multi-GB model weights.

    Attributes:
        max_files: members (files, folders, links) an archive may hold.
        max_total_bytes: bytes it may expand to (64 GiB); with `fit_disk` also
            never more than the free space of the disk it is extracted to.
        max_ratio: expansion past this many times the archive's own size is
            refused once past `ratio_grace` bytes; 0 turns the check off. Weights
            barely compress (ratio about 1), code and vocabularies about 3-10,
            while a zip bomb expands hundreds to thousands of times: 200 leaves
            honest archives a wide margin.
        ratio_grace: bytes any archive may expand to whatever its ratio (16 MiB).
        max_manifest_bytes: size of `MAR-INF/MANIFEST.json` (1 MiB).
        max_link_bytes: length of a link target (4096, Linux's PATH_MAX).
        fit_disk: cap the total by the free disk space when extraction starts.
    """

    max_files: int = 100_000
    max_total_bytes: int = 64 * 1024**3
    max_ratio: float = 200.0
    ratio_grace: int = 16 * 1024**2
    max_manifest_bytes: int = MAX_MANIFEST_BYTES
    max_link_bytes: int = 4096
    fit_disk: bool = True


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
        try:
            _Extractor(staging, limits or ExtractLimits()).extract(src)
        except _CORRUPT as exc:
            raise ArchiveError("Cannot read the archive: corrupt or unsupported.") from exc
        except OSError as exc:
            if exc.errno != errno.ENAMETOOLONG:
                raise
            raise ArchiveError("Cannot extract the archive: a member's name is too long "
                               "for the file system.") from None  # fmt: skip
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


def _is_manifest(relative: PurePosixPath) -> bool:
    text = relative.as_posix()
    return text == MANIFEST_PATH or text.endswith("/" + MANIFEST_PATH)


class _Extractor:
    """Writes members below `root`, enforcing the limits and the path rules."""

    def __init__(self, root: Path, limits: ExtractLimits) -> None:
        self.root = root
        self.real_root = os.path.realpath(root)
        self.limits = limits
        self.members = 0
        self.bytes = 0
        self.budget = limits.max_total_bytes
        self.why = "ExtractLimits.max_total_bytes"

    def extract(self, source: Path) -> None:
        if not source.is_file():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(source))
        self._set_budget(source.stat().st_size)
        if zipfile.is_zipfile(source):
            with zipfile.ZipFile(source) as zf:
                self._extract_zip(zf)
        else:
            tar = open_tar(source)
            if tar is None:
                raise NotAnArchive(f"Not a model archive (zip or tar.gz): {shown(source.name)}")
            with tar:
                self._extract_tar(tar)
        self._check_links()

    def _set_budget(self, archive_size: int) -> None:
        """The bytes this archive may expand to: the smallest of the caps, and why."""
        limits = self.limits
        caps = [(limits.max_total_bytes, "ExtractLimits.max_total_bytes")]
        if limits.fit_disk:
            caps.append((shutil.disk_usage(self.root).free, "the free disk space"))
        if limits.max_ratio > 0:
            ratio_cap = max(int(limits.max_ratio * archive_size), limits.ratio_grace)
            caps.append((ratio_cap, f"{limits.max_ratio:g} times the archive's size"))
        self.budget, self.why = min(caps)

    def _extract_zip(self, zf: zipfile.ZipFile) -> None:
        infos = zf.infolist()
        if len(infos) > self.limits.max_files:
            self._too_many()
        for info in infos:
            relative = safe_member_path(info.filename)
            mode = info.external_attr >> 16
            self._count()
            if info.is_dir():
                self._directory(relative)
            elif stat.S_ISLNK(mode):
                self._symlink(relative, self._zip_link_target(zf, info, relative))
            else:
                self._check_declared(relative, info.file_size)
                with zf.open(info) as stream:
                    self._file(relative, stream, mode & 0o755)

    def _zip_link_target(
        self, zf: zipfile.ZipFile, info: zipfile.ZipInfo, relative: PurePosixPath
    ) -> str:
        """A zip symlink's target (the member's content), read only up to `max_link_bytes`."""
        cap = self.limits.max_link_bytes
        too_long = UnsafeArchive(f"Archive link {shown(relative)} has a target over {cap} bytes.")
        if info.file_size > cap:
            raise too_long
        with zf.open(info) as stream:
            data = stream.read(cap + 1)
        if len(data) > cap:
            raise too_long
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise UnsafeArchive(
                f"Archive link {shown(relative)} has a target that is not text."
            ) from None

    def _extract_tar(self, tar: tarfile.TarFile) -> None:
        for member in tar:
            relative = safe_member_path(member.name)
            self._count()
            if member.isdir():
                self._directory(relative)
            elif member.issym():
                self._symlink(relative, member.linkname)
            elif member.islnk():
                self._hardlink(relative, safe_member_path(member.linkname))
            elif member.isreg():
                self._check_declared(relative, member.size)
                stream = tar.extractfile(member)
                assert stream is not None  # a regular member always has data
                with stream:
                    self._file(relative, stream, member.mode & 0o755)
            else:
                raise UnsafeArchive(f"Archive member is not a file or folder: {shown(member.name)}")

    def _too_many(self) -> None:
        raise UnsafeArchive(
            f"Archive holds more than {self.limits.max_files} members; refusing to extract."
        )

    def _count(self) -> None:
        self.members += 1
        if self.members > self.limits.max_files:
            self._too_many()

    def _spend(self, size: int) -> None:
        """Count `size` more bytes against the budget."""
        self.bytes += size
        if self.bytes > self.budget:
            raise UnsafeArchive(
                f"Archive expands past {self.budget} bytes ({self.why}); refusing to extract."
            )

    def _check_declared(self, relative: PurePosixPath, size: int) -> None:
        """Refuse a member by its declared size, before reading any of it."""
        if _is_manifest(relative) and size > self.limits.max_manifest_bytes:
            self._manifest_too_big()
        if self.bytes + size > self.budget:
            self._spend(size)

    def _manifest_too_big(self) -> None:
        cap = self.limits.max_manifest_bytes
        raise UnsafeArchive(f"Archive manifest is over {cap} bytes; refusing to extract.")

    def _inside(self, relative: PurePosixPath) -> Path:
        """The destination of `relative`, after checking links on the way stay inside."""
        path = self.root.joinpath(*relative.parts)
        if not self._contains(os.path.realpath(path)):
            raise UnsafeArchive(f"Archive member leaves the target folder: {shown(relative)}")
        return path

    def _contains(self, real: str) -> bool:
        return real == self.real_root or real.startswith(self.real_root + os.sep)

    def _directory(self, relative: PurePosixPath) -> None:
        path = self._inside(relative)
        if os.path.lexists(path) and not path.is_dir():
            self._twice(relative)
        path.mkdir(parents=True, exist_ok=True)

    def _file(self, relative: PurePosixPath, stream: IO[bytes], mode: int) -> None:
        path = self._inside(relative)
        if path.is_dir():
            self._twice(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._inside(relative)  # parents may be links created by earlier members
        manifest_cap = self.limits.max_manifest_bytes if _is_manifest(relative) else None
        written = 0
        with open(path, "wb") as out:
            for chunk in iter(lambda: stream.read(_CHUNK), b""):
                written += len(chunk)
                if manifest_cap is not None and written > manifest_cap:
                    self._manifest_too_big()
                self._spend(len(chunk))
                out.write(chunk)
        os.chmod(path, (mode or 0o644) | 0o600)

    def _symlink(self, relative: PurePosixPath, target: str) -> None:
        link = self._inside(relative)
        outside = UnsafeArchive(f"Archive link {shown(relative)} points outside the model folder.")
        if len(target.encode("utf-8", "surrogateescape")) > self.limits.max_link_bytes:
            raise UnsafeArchive(f"Archive link {shown(relative)} has an oversized target.")
        if not target or "\x00" in target or os.path.isabs(target.replace("\\", "/")):
            raise outside
        if not self._contains(os.path.realpath(link.parent / target)):
            raise outside
        link.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(link):
            self._twice(relative)
        os.symlink(target, link)

    def _twice(self, relative: PurePosixPath) -> None:
        raise UnsafeArchive(f"Archive member {shown(relative)} clashes with an earlier member.")

    def _hardlink(self, relative: PurePosixPath, target: PurePosixPath) -> None:
        source = self._inside(target)
        if not source.is_file():
            raise UnsafeArchive(f"Archive hard link {shown(relative)} has no extracted target.")
        self._spend(source.stat().st_size)  # a copy: each link costs its bytes again
        destination = self._inside(relative)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)

    def _check_links(self) -> None:
        """Every link of the final tree resolves inside it (later members may have moved it)."""
        for folder, dirs, files in os.walk(self.root):
            for name in (*dirs, *files):
                path = os.path.join(folder, name)
                if os.path.islink(path) and not self._contains(os.path.realpath(path)):
                    relative = os.path.relpath(path, self.root)
                    raise UnsafeArchive(
                        f"Archive link {shown(relative)} points outside the model folder."
                    )
