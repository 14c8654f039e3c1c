"""`jupyter-serve-archiver`: a drop-in for `torch-model-archiver`, plus `inspect`.

    jupyter-serve-archiver --model-name m -v 1.0 --handler h.py [...]   # build
    jupyter-serve-archiver inspect m.mar [--json]                       # look inside

Exit status as torch-model-archiver: 0 on success, 2 for bad or missing flags
(argparse), 1 when the build fails (output exists without --force, a missing
input, a bad model name or export path). Errors are printed as
`ERROR - <message>` on stderr, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from jupyter_serve.archive.build import build_mar
from jupyter_serve.archive.extract import inspect_archive
from jupyter_serve.archive.spec import ArchiveSpec, archiver_parser
from jupyter_serve.wire.errors import ArchiveError

PROG = "jupyter-serve-archiver"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the archiver on `argv` (default: `sys.argv[1:]`); return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    _configure_logging()
    if args[:1] == ["inspect"]:
        return _inspect(args[1:])
    spec = ArchiveSpec.from_args(archiver_parser(PROG).parse_args(args))
    try:
        build_mar(spec)
    except (ArchiveError, OSError, ValueError) as exc:
        print(f"ERROR - {_message(exc)}", file=sys.stderr)
        return 1
    return 0


def _inspect(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} inspect", description="Print a model archive's manifest and files."
    )
    parser.add_argument("archive", help="A .mar, .tar.gz or no-archive folder.")
    parser.add_argument("--json", action="store_true", help="Print one JSON document.")
    args = parser.parse_args(argv)
    try:
        listing = inspect_archive(args.archive)
    except (ArchiveError, OSError) as exc:
        print(f"ERROR - {_message(exc)}", file=sys.stderr)
        return 1
    manifest = listing.manifest.to_dict() if listing.manifest else None
    if args.json:
        files = [{"name": name, "size": size} for name, size in listing.files]
        print(json.dumps({"manifest": manifest, "files": files}, indent=2))
        return 0
    print("Manifest:" if manifest else "Manifest: none (TorchServe would use a default one)")
    if manifest:
        print(json.dumps(manifest, indent=2))
    print(f"\nFiles ({len(listing.files)}):")
    width = max((len(str(size)) for _, size in listing.files), default=1)
    for name, size in listing.files:
        print(f"  {size:>{width}}  {name}")
    return 0


def _message(exc: BaseException) -> str:
    if isinstance(exc, ArchiveError):
        return exc.message
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        return f"{exc.strerror}: {exc.filename}"
    return str(exc)


def _configure_logging() -> None:
    # Only when run as a command: torch-model-archiver's "LEVEL - message" lines.
    logging.basicConfig(format="%(levelname)s - %(message)s", level=logging.WARNING)


if __name__ == "__main__":
    sys.exit(main())
