"""`jupyter serve`: a Jupyter server with jupyter_serve enabled, like `torchserve --start`.

TorchServe's flags map to `ServeApp` traits; every other argument goes to the
Jupyter server (`--port`, `--IdentityProvider.token=...`, `--no-browser`,
`--ServeApp.<trait>=...`)::

    jupyter serve --model-store DIR --models name=x.mar [...] | all
                  --ts-config config.properties --ncs/--no-config-snapshots --demo

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

from .app import ServeApp
from .demo import DEMO_MODEL, build_demo

__all__ = ["main", "parser", "server_argv"]


def parser() -> argparse.ArgumentParser:
    """The TorchServe-style flags; unknown arguments are the Jupyter server's."""
    parse = argparse.ArgumentParser(
        prog="jupyter serve",
        description="Start a Jupyter server serving PyTorch models under {base_url}serve/. "
        "Other arguments go to the Jupyter server (--port, --IdentityProvider.token=...).",
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until SIGINT/SIGTERM; returns the exit code."""
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
    """Kill workers and spares a cleanup that never ran left behind (the loop ended early)."""
    spares = getattr(serve, "spares", None)
    if spares is not None:
        spares.kill()
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
