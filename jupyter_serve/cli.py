"""`jupyter serve`: a Jupyter server with jupyter_serve enabled, like `torchserve --start`.

TorchServe's flags map to `ServeApp` traits; every other argument goes to the
Jupyter server (`--port`, `--IdentityProvider.token=...`, `--no-browser`,
`--ServeApp.<trait>=...`)::

    jupyter serve --model-store DIR --models name=x.mar [...] | all
                  --ts-config config.properties --ncs/--no-config-snapshots --demo

`jupyter serve keys list|create [--name N] [--models a,b]|revoke ID [--url U --token T]`
manages the inference keys of a running server instead (found as the magics find
one: `JUPYTER_SERVE_URL`/`JUPYTER_SERVE_TOKEN`, else the one running server's
runtime file; `--url` alone takes the token of that server's runtime file);
`create` prints the key alone on stdout, the only time it is shown. A refusal is
one line on stderr, and a 403 says how to give the token (failures.py).

`jupyter serve export DIR [--models a,b] [--force] [--protocol v1|v2] [--storage-uri U]
[--snapshot FILE] [--url U --token T]` writes what a running server (found the same
way) or a snapshot file serves as TorchServe/KServe files (`jupyter_serve.export`).

`--demo` builds the demo model (`jupyter_serve.demo`) into the model store and
loads it as "demo". As root, `--allow-root` is added (Jupyter refuses root
otherwise). SIGINT and SIGTERM stop the server at once, without Jupyter's
"Shut down this Jupyter server?" prompt, and the workers with it; should the
event loop end before its cleanup ran, the remaining workers are killed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from jupyter_server.serverapp import ServerApp

from jupyter_serve.demo import DEMO_MODEL, build_demo
from jupyter_serve.kernel.client import ServeClient, ServeClientError, ServerNotFound, discover
from jupyter_serve.kernel.failures import CLI_TOKEN_HINT, answer_line
from jupyter_serve.server.app import ServeApp
from jupyter_serve.server.keys import key_table

__all__ = ["export_main", "keys_main", "keys_parser", "main", "parser", "server_argv"]


def parser() -> argparse.ArgumentParser:
    """The TorchServe-style flags; unknown arguments are the Jupyter server's."""
    parse = argparse.ArgumentParser(
        prog="jupyter serve",
        description="Start a Jupyter server serving PyTorch models under {base_url}serve/. "
        "Other arguments go to the Jupyter server (--port, --IdentityProvider.token=...).",
        epilog="`jupyter serve keys --help`: inference keys of a running server; "
        "`jupyter serve export --help`: its models as TorchServe/KServe files.",
    )
    parse.add_argument("--model-store", help="Folder of model archives (.mar).")
    parse.add_argument(
        "--models", nargs="+", default=[], help="Models to load at start: name=x.mar, x.mar, all."
    )
    parse.add_argument("--ts-config", help="A TorchServe config.properties to honour.")
    parse.add_argument(
        "--ncs",
        "--no-config-snapshots",
        dest="no_snapshots",
        action="store_true",
        help="Neither restore nor write model snapshots.",
    )
    parse.add_argument(
        "--demo", action="store_true", help=f'Build the demo model and serve it as "{DEMO_MODEL}".'
    )
    return parse


def server_argv(args: argparse.Namespace, rest: Sequence[str]) -> list[str]:
    """The Jupyter server's command line: the flags as ServeApp traits, then `rest`."""
    argv = [f"--ServeApp.load_models={entry}" for entry in args.models]
    if args.model_store:
        argv.append(f"--ServeApp.model_store={os.path.abspath(args.model_store)}")
    if args.ts_config:
        argv.append(f"--ServeApp.ts_config={os.path.abspath(args.ts_config)}")
    if args.no_snapshots:
        argv.append("--ServeApp.snapshots=False")
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in rest:
        argv.append("--allow-root")
    lab = importlib.util.find_spec("jupyterlab") is not None
    if lab and not any(arg.startswith("--ServerApp.default_url") for arg in rest):
        argv.append("--ServerApp.default_url=/lab")
    return [*argv, *rest]


def keys_parser() -> argparse.ArgumentParser:
    """`jupyter serve keys ...`: list, create or revoke a running server's inference keys."""
    server = argparse.ArgumentParser(add_help=False)
    server.add_argument("--url", help="The Jupyter server (default: found as the magics do).")
    server.add_argument("--token", help="Its token (default: $JUPYTER_SERVE_TOKEN or its file).")
    parse = argparse.ArgumentParser(
        prog="jupyter serve keys",
        description="Inference keys: they may run models (all, or the ones named), never "
        "open kernels, files or terminals.",
    )
    sub = parse.add_subparsers(dest="action", required=True)
    sub.add_parser("list", parents=[server], help="List the keys (never their secrets).")
    create = sub.add_parser("create", parents=[server], help="Mint a key; prints it once.")
    create.add_argument("--name", default="", help="A label for the key.")
    create.add_argument("--models", default="", help="Models it may run, a,b (default: all).")
    revoke = sub.add_parser("revoke", parents=[server], help="Revoke a key at once.")
    revoke.add_argument("key_id", metavar="ID")
    return parse


def keys_main(argv: Sequence[str]) -> int:
    """Run one `jupyter serve keys` command; returns the exit code."""
    args = keys_parser().parse_args(argv)
    try:
        client = ServeClient(discover(args.url, args.token, any_server=True), timeout=30)
        _key_command(client, args)
    except (ServerNotFound, ServeClientError, OSError) as error:
        failed("jupyter serve keys", error)
        return 1
    return 0


def failed(prog: str, error: Exception) -> None:
    """`prog: <why>` on stderr; an error answer as `HTTP <status> <message> (<hint>)`."""
    said = answer_line(error, CLI_TOKEN_HINT) if isinstance(error, ServeClientError) else error
    print(f"{prog}: {said}", file=sys.stderr)


def _key_command(client: ServeClient, args: argparse.Namespace) -> None:
    if args.action == "list":
        print(key_table(client.list_keys()))
    elif args.action == "create":
        models = [name for name in args.models.split(",") if name.strip()] or None
        minted = client.create_key(args.name, models)
        scope = ", ".join(minted["models"] or ["every model"])
        print(f"Key {minted['id']} may run: {scope}. It is shown only now:", file=sys.stderr)
        print(minted["key"])
    else:
        print(client.revoke_key(args.key_id)["status"])


def export_main(argv: Sequence[str]) -> int:
    """Run one `jupyter serve export`; returns the exit code (export/command.py)."""
    from jupyter_serve.export import ExportError, add_export_arguments, export_status, run_export

    parse = argparse.ArgumentParser(
        prog="jupyter serve export",
        description="Write what the notebook server serves as TorchServe and KServe files.",
    )
    parse.add_argument("--url", help="The Jupyter server (default: found as the magics do).")
    parse.add_argument("--token", help="Its token (default: $JUPYTER_SERVE_TOKEN or its file).")
    args = add_export_arguments(parse).parse_args(argv)

    def client() -> ServeClient:
        return ServeClient(discover(args.url, args.token, any_server=True), timeout=600)

    try:
        return export_status(run_export(args, client))
    except (ExportError, ServerNotFound, ServeClientError, OSError, ValueError) as error:
        failed("jupyter serve export", error)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until SIGINT/SIGTERM (or a `keys` command); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["keys"]:
        return keys_main(argv[1:])
    if argv[:1] == ["export"]:
        return export_main(argv[1:])
    args, rest = parser().parse_known_args(argv)
    server = ServerApp.instance(jpserver_extensions={"jupyter_serve": True})
    server.classes = [*server.classes, ServeApp]  # `--help-all` lists ServeApp's traits
    server.initialize(argv=server_argv(args, rest))
    serve = _serve_app(server)
    if args.demo:
        build_demo(serve.model_store)
        serve.load_models = [*serve.load_models, f"{DEMO_MODEL}={DEMO_MODEL}.mar"]
    _stop_on_signals(server)
    try:
        server.start()
    finally:
        _kill_leftovers(serve)
    return 0


def _serve_app(server: Any) -> ServeApp:
    app = server.extension_manager.extension_points["jupyter_serve"].app
    if not isinstance(app, ServeApp):
        raise SystemExit("jupyter serve: the jupyter_serve extension did not load.")
    return app


def _stop_on_signals(server: Any) -> None:
    """SIGINT and SIGTERM stop the server (and its workers) with no prompt."""

    def stop(signum: int, frame: Any) -> None:
        server.log.critical("jupyter serve: received signal %s, stopping", signum)
        server.stop(from_signal=True)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def _kill_leftovers(serve: ServeApp) -> None:
    """Kill workers and the factory a cleanup that never ran left behind (the loop ended early)."""
    factory = getattr(serve, "factory", None)
    if factory is not None:
        factory.kill()
    registry = getattr(serve, "registry", None)
    if registry is None:
        return
    for name in _model_names(registry):
        for model in registry.versions(name):
            for worker in model.pool.processes:
                worker.kill()


def _model_names(registry: Any) -> list[str]:
    names: list[str] = []
    token: str | None = "0"
    while token is not None:
        page = registry.list_models(next_page_token=int(token))
        names.extend(entry["modelName"] for entry in page["models"])
        token = page.get("nextPageToken")
    return names


if __name__ == "__main__":
    sys.exit(main())
