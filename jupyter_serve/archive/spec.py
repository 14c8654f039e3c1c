"""`ArchiveSpec` and the one argument parser behind `jupyter-serve-archiver` and `%mar build`.

The flags, spellings, defaults and required-ness are torch-model-archiver 0.12's,
so a build script can swap `torch-model-archiver` for `jupyter-serve-archiver`::

    --model-name NAME        (required)   -v/--version V        (required)
    --handler H              (required)   --serialized-file F   --model-file F
    --extra-files A,B,dir,*.json          --runtime {python,python3,LSP}
    --export-path DIR (cwd)  --archive-format {tgz,no-archive,zip-store,default}
    -f/--force               -r/--requirements-file F          -c/--config-file F
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from jupyter_serve.archive.manifest import RUNTIMES
from jupyter_serve.wire.errors import ArchiveError

ARCHIVE_FORMATS = ("tgz", "no-archive", "zip-store", "default")


def _split_extra_files(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if not value:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(item.strip() for item in items if item.strip())


@dataclass(frozen=True)
class ArchiveSpec:
    """Everything `build_mar` needs; field names follow torch-model-archiver's config."""

    model_name: str
    handler: str
    version: str
    serialized_file: str | None = None
    model_file: str | None = None
    extra_files: tuple[str, ...] = ()
    runtime: str = "python"
    export_path: str = field(default_factory=os.getcwd)
    archive_format: str = "default"
    force: bool = False
    requirements_file: str | None = None
    config_file: str | None = None

    def __post_init__(self) -> None:
        # Accept the CLI's comma-separated string as well as a list.
        object.__setattr__(self, "extra_files", _split_extra_files(self.extra_files))
        if self.runtime not in RUNTIMES:
            raise ArchiveError(f"Invalid runtime {self.runtime!r}: choose from {RUNTIMES}.")
        if self.archive_format not in ARCHIVE_FORMATS:
            raise ArchiveError(
                f"Invalid archive format {self.archive_format!r}: choose from {ARCHIVE_FORMATS}."
            )
        if not self.handler:
            raise ArchiveError("A handler is required: a built-in name or path/to/file.py[:fn].")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ArchiveSpec:
        """Build a spec from the namespace `archiver_parser()` produced."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})

    @classmethod
    def parse(cls, argv: Sequence[str], prog: str = "jupyter-serve-archiver") -> ArchiveSpec:
        """Parse torch-model-archiver arguments (argparse exits with status 2 on bad ones)."""
        return cls.from_args(archiver_parser(prog).parse_args(list(argv)))


def archiver_parser(
    prog: str = "jupyter-serve-archiver",
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
) -> argparse.ArgumentParser:
    """The torch-model-archiver 0.12 command line, flag for flag (`%mar build` shares it)."""
    parser = parser_class(
        prog=prog,
        description="Build a TorchServe model archive (.mar) - torch-model-archiver compatible.",
        epilog=f"`{prog} inspect X.mar` prints an archive's manifest and files.",
    )
    add = parser.add_argument
    add("--model-name", required=True, help="Model name; the output is <model-name>.mar.")
    add("--serialized-file", help="A .pt/.pth state_dict, TorchScript module or .onnx file.")
    add("--model-file", help="Python file defining the eager-mode nn.Module (one class).")
    add("--handler", required=True, help="A default handler name or path/to/handler.py[:fn].")
    add("--extra-files", help="Comma-separated files, folders or glob patterns to include.")
    add("--runtime", default="python", choices=RUNTIMES, help='Runtime (default "python").')
    add("--export-path", default=os.getcwd(), help="Folder for the output (default: cwd).")
    add(
        "--archive-format",
        default="default",
        choices=ARCHIVE_FORMATS,
        help="default: deflated .mar; zip-store: stored .mar; tgz: <name>.tar.gz; "
        "no-archive: a folder <export-path>/<name> with MAR-INF/MANIFEST.json.",
    )
    add("-f", "--force", action="store_true", help="Overwrite an existing output.")
    add("-v", "--version", required=True, help="Model version.")
    add("-r", "--requirements-file", help="requirements.txt with the model's pip dependencies.")
    add("-c", "--config-file", help="model-config.yaml (batchSize, workers, handler settings...).")
    return parser
