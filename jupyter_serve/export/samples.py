"""`DIR/samples/`: one example request body per exported model, for the README's curl.

A model whose default version's archive ships an example body (facts.py's
`sample_member`: `sample.json`, `example.txt`, `input.png`...) gets it written as
`samples/<model><suffix>`, and the README sends it with `--data-binary @samples/...`.
A model without one gets no file: the README shows an inline JSON body to replace.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from jupyter_serve.archive.members import open_tar
from jupyter_serve.export.facts import MAX_SAMPLE_BYTES

if TYPE_CHECKING:  # readme.py imports `Sample`
    from jupyter_serve.export.readme import Exported

__all__ = ["CONTENT_TYPES", "Sample", "write_samples"]

CONTENT_TYPES = {
    ".json": "application/json",
    ".txt": "text/plain",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".png": "image/png",
}


@dataclass(frozen=True)
class Sample:
    """A model's example body: `path` relative to DIR, and its content type."""

    path: str
    content_type: str


def write_samples(folder: Path, store: Path, exported: Sequence[Exported]) -> dict[str, Sample]:
    """Write each model's sample into `folder/samples/`; returns them by model name."""
    written: dict[str, Sample] = {}
    for entry in sorted(exported, key=lambda e: not e.item.default):  # defaults first
        name, member = entry.item.name, entry.facts.sample
        if member is None or name in written:
            continue
        body = _member_bytes(store / entry.mar, member)
        if body is None:
            continue
        suffix = PurePosixPath(member).suffix.lower()
        target = Path("samples") / f"{name}{suffix}"
        (folder / "samples").mkdir(exist_ok=True)
        (folder / target).write_bytes(body)
        written[name] = Sample(target.as_posix(), CONTENT_TYPES[suffix])
    return written


def _member_bytes(archive: Path, member: str) -> bytes | None:
    """The bytes of `member` of a zip or tar archive (None: not there, or unreadable)."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf, zf.open(member) as stream:
            return stream.read(MAX_SAMPLE_BYTES)
    tar = open_tar(archive)
    if tar is None:
        return None
    with tar:
        found = tar.extractfile(member)
        return found.read(MAX_SAMPLE_BYTES) if found else None
