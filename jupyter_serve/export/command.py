"""`jupyter serve export DIR` and `%serve export DIR`: the arguments and the run, shared.

    DIR [--models a,b] [--force] [--protocol v1|v2] [--storage-uri URI] [--name N]
        [--snapshot FILE [--model-store STORE]]

Without `--snapshot` the export asks a running server (the CLI finds it as the magics
do; the magic uses the server it talks to). `run_export` prints what was exported and
each version left out with its reason; `export_status` is the exit code: 0 everything,
2 some versions left out (named on stderr), 1 nothing written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from jupyter_serve.export.gather import from_server, from_snapshot
from jupyter_serve.export.layout import ExportOptions, ExportResult, write_export
from jupyter_serve.export.plan import ExportError
from jupyter_serve.kernel.client import ServeClient
from jupyter_serve.kernel.failures import failure_line

__all__ = ["add_export_arguments", "export_in_notebook", "export_status", "run_export"]


def add_export_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The export's arguments, added to `parser` (the CLI's or the magic's)."""
    add = parser.add_argument
    add("dir", metavar="DIR", help="The folder to write (new or empty, else --force).")
    add("--models", default="", help="Models to export, a,b (default: every registered one).")
    add("--force", action="store_true", help="Replace DIR when it is not empty.")
    protocol = "The InferenceService's KServe protocol (v2: the Open Inference Protocol)."
    add("--protocol", choices=("v1", "v2"), default="v1", help=protocol)
    add("--storage-uri", help="Where DIR will be uploaded (the InferenceService's storageUri).")
    add("--name", help="The InferenceService's name (default: DIR's name).")
    add("--snapshot", help="Export a snapshot file (<workdir>/snapshot.json), not a server.")
    store = "With --snapshot: the model store its archive names are in (./model_store)."
    add("--model-store", default="model_store", help=store)
    return parser


def run_export(args: argparse.Namespace, client: Callable[[], ServeClient]) -> ExportResult:
    """Gather, write and report one export; `client` is called only without --snapshot.

    Raises:
        ExportError: nothing was written (the message says why).
        OSError, ValueError: the snapshot file cannot be read.
        ServeClientError: the server refused to list or describe its models.
    """
    chosen = [name.strip() for name in args.models.split(",") if name.strip()] or None
    if args.snapshot:
        items, skipped = from_snapshot(Path(args.snapshot), Path(args.model_store), chosen)
    else:
        items, skipped = from_server(client(), chosen)
    options = ExportOptions(args.force, args.protocol, args.storage_uri, args.name)
    result = write_export(Path(args.dir), items, skipped, options)
    report(result)
    return result


def export_in_notebook(
    args: argparse.Namespace, client: Callable[[], ServeClient]
) -> ExportResult | None:
    """`%serve export`: `run_export`, a refused export (DIR taken, nothing to export) shown
    as one line like any failed `%serve` (raised with `--debug`)."""
    try:
        return run_export(args, client)
    except ExportError as error:
        if args.debug:
            raise
        print(failure_line("Export", error))
        return None


def report(result: ExportResult) -> None:
    """What was exported (stdout) and what was left out, with why (stderr)."""
    count = len(result.exported)
    print(f"Exported {count} model version{'s' if count != 1 else ''} to {result.path}:")
    for exported in result.exported:
        item = exported.item
        default = " (default)" if item.default else ""
        print(f"  {item.name} {item.version}{default}: model-store/{exported.mar}")
    for skipped in result.skipped:
        print(f"Not exported: {skipped}", file=sys.stderr)


def export_status(result: ExportResult) -> int:
    return 2 if result.skipped else 0
