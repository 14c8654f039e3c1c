"""The magics' command lines: the argparse parsers of `%%handler` and `%serve`.

`UsageParser` raises IPython's UsageError instead of exiting the kernel; `%mar build`
uses it too, with torch-model-archiver's flags (`archive.archiver_parser`), and
`%serve export` takes `jupyter serve export`'s arguments (`export.add_export_arguments`).

What does NOT live here: what each command does, and the usage summary of every
magic, are in magics.py.
"""

from __future__ import annotations

import argparse
from typing import Any

from IPython.core.error import UsageError


class UsageParser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting the kernel."""

    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage()}")

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise UsageError(message or self.format_help())


def handler_parser() -> UsageParser:
    """`%%handler NAME [--class C | --function F] ...`: the cell's archive and serving."""
    p = UsageParser(prog="%%handler", add_help=False)
    p.add_argument("name")
    entry = p.add_mutually_exclusive_group()
    entry.add_argument("--class", dest="entry", help="The handler class (module:Class).")
    entry.add_argument("--function", dest="entry", help="The entry function (module:fn).")
    p.add_argument("--model-file")
    p.add_argument("--serialized-file")
    p.add_argument("--extra-files", default="")
    p.add_argument("--serve", action="store_true")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--max-batch-delay", type=int)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--version", default="1.0")
    p.add_argument("--debug", action="store_true", help="Raise failures with a traceback.")
    return p


def body_arguments(p: argparse.ArgumentParser) -> None:
    """`DATA | --file F | --json J`: a request body (magics.py's `request_body` reads them)."""
    p.add_argument("data", nargs="?", help="Text sent as the body.")
    p.add_argument("--file", help="A file sent as the body (application/octet-stream).")
    p.add_argument("--json", help="JSON text sent as an application/json body.")


def serve_parser() -> UsageParser:
    """`%serve [--debug] COMMAND ...`: one subcommand per `ServeMagics._serve_<command>`."""
    p = UsageParser(prog="%serve", add_help=False)
    p.add_argument("--debug", action="store_true", help="Raise failures with a traceback.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=UsageParser)
    connect = sub.add_parser("connect")
    connect.add_argument("url")
    connect.add_argument("--token", default="")
    for name in ("try", "predict", "explain"):
        command = sub.add_parser(name)
        command.add_argument("name")
        body_arguments(command)
    register = sub.add_parser("register")
    register.add_argument("url")
    for flag in ("--model-name", "--handler"):
        register.add_argument(flag)
    for flag in ("--batch-size", "--max-batch-delay", "--workers"):
        register.add_argument(flag, type=int)
    register.add_argument("--overwrite", action="store_true")
    for name in ("scale", "unregister", "describe"):
        command = sub.add_parser(name)
        command.add_argument("name")
        command.add_argument("--version")
        if name == "scale":
            command.add_argument("--min", type=int, required=True)
            command.add_argument("--max", type=int)
    chat = sub.add_parser("chat")
    chat.add_argument("name", help="A served language model (name or name/version).")
    chat.add_argument("prompt")
    chat.add_argument("--max-tokens", type=int, default=128)
    chat.add_argument("--temperature", type=float)
    chat.add_argument("--seed", type=int)
    chat.add_argument("--system", help="A system message before the prompt.")
    sub.add_parser("list")
    logs = sub.add_parser("logs")
    logs.add_argument("name")
    logs.add_argument("--version")
    logs.add_argument("--lines", type=int, default=200)
    dashboard = sub.add_parser("dashboard")
    dashboard.add_argument("--interval", type=float, default=2.0)
    keys = sub.add_parser("keys")
    actions = keys.add_subparsers(dest="action", required=True, parser_class=UsageParser)
    actions.add_parser("list")
    create = actions.add_parser("create")
    create.add_argument("--name", default="")
    create.add_argument("--models", default="")
    actions.add_parser("revoke").add_argument("key_id")
    from jupyter_serve.export import (
        add_export_arguments,  # the same arguments as `jupyter serve export`
    )

    add_export_arguments(sub.add_parser("export"))
    return p
