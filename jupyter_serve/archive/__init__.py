"""Model archives (`.mar`): build, inspect and extract them as torch-model-archiver 0.12 does.

Standard library only: the server, the workers, the kernel-side magics and the
CLI all import this package.
"""

from __future__ import annotations

from jupyter_serve.archive.build import (
    BUILTIN_HANDLERS,
    build_mar,
    collect_files,
    manifest_for,
    output_path,
    pack_folder,
)
from jupyter_serve.archive.extract import (
    ArchiveListing,
    ExtractLimits,
    extract_mar,
    inspect_archive,
    model_root,
)
from jupyter_serve.archive.manifest import (
    MANIFEST_PATH,
    Manifest,
    ModelInfo,
    check_model_name,
    read_manifest,
)
from jupyter_serve.archive.repack import holds_version, repack, running_manifest
from jupyter_serve.archive.spec import ARCHIVE_FORMATS, ArchiveSpec, archiver_parser

__all__ = [
    "ARCHIVE_FORMATS",
    "BUILTIN_HANDLERS",
    "MANIFEST_PATH",
    "ArchiveListing",
    "ArchiveSpec",
    "ExtractLimits",
    "Manifest",
    "ModelInfo",
    "archiver_parser",
    "build_mar",
    "check_model_name",
    "collect_files",
    "extract_mar",
    "holds_version",
    "inspect_archive",
    "manifest_for",
    "model_root",
    "output_path",
    "pack_folder",
    "read_manifest",
    "repack",
    "running_manifest",
]
