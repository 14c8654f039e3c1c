"""What an export holds: one `ExportItem` per model version, and what could not be exported.

An item carries the settings the notebook server served the version with, in
TorchServe's units (`maxBatchDelay` in milliseconds, timeouts in whole seconds), the
device it ran on, the largest memory one of its workers used (when measured), and
`fetch`, which writes the version's `.mar` to a path (`gather` makes it: a download
from the server, or a copy or repack of the files a snapshot names).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ExportError", "ExportItem", "NotExported", "Skipped"]


class ExportError(Exception):
    """The export as a whole cannot be written (nothing was left behind)."""


class NotExported(Exception):
    """One model version cannot be exported; the message says why."""


@dataclass(frozen=True)
class Skipped:
    """A model (version) left out, and why."""

    name: str
    version: str  # "" when the whole model is meant
    reason: str

    def __str__(self) -> str:
        what = f"{self.name} {self.version}" if self.version else self.name
        return f"{what}: {self.reason}"


@dataclass(frozen=True)
class ExportItem:
    """One model version to export, with what it served with."""

    name: str
    version: str
    default: bool
    fetch: Callable[[Path], None] = field(compare=False, repr=False)
    min_workers: int = 1
    max_workers: int = 1
    batch_size: int = 1
    max_batch_delay_ms: int = 100
    response_timeout: int = 120
    startup_timeout: int = 120
    runtime: str = "python"
    device_type: str = "cpu"
    device_ids: tuple[int, ...] = ()
    worker_memory: int | None = None  # bytes: the largest RSS of its workers, when measured

    @property
    def on_gpu(self) -> bool:
        return self.device_type == "gpu"
