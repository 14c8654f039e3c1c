"""``python -m jupyter_serve.worker --fd N [--torch-threads K] [--spare]``: one model's worker.

`N` is an inherited, connected AF_UNIX stream socket (one end of a socketpair
passed with `pass_fds`). stdout and stderr carry only log text; frames travel on
the socket. Exit status: 0 on EOF, 1 after a failed load, 2 on a protocol error.

With `--spare` the worker is started before its model is known: it imports
torch and the handler runtime first, sends one ``R {"message": "spare"}`` frame,
then waits for its `L` frame as any worker does (see `warm`).
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys

from ..protocol import ProtocolError, write_frame_sync
from . import compat, warm
from .service import ModelService, serve

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jupyter_serve.worker", description=__doc__)
    p.add_argument("--fd", type=int, required=True, help="inherited connected socket")
    p.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch.set_num_threads(K) after load, if the handler imported torch",
    )
    p.add_argument(
        "--spare",
        action="store_true",
        help="import torch and the handler runtime now, say so, then wait for the load request",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    _setup_output()
    compat.install()
    service = ModelService(torch_threads=args.torch_threads, chdir=True)
    with socket.socket(fileno=args.fd) as sock:
        try:
            if args.spare and not _announce(sock):
                return 0
            return serve(sock, service)
        except ProtocolError as exc:
            print(f"jupyter_serve worker: protocol error: {exc}", file=sys.stderr, flush=True)
            return 2


def _announce(sock: socket.socket) -> bool:
    """Warm up and tell the server; False if it hung up meanwhile (nothing to serve)."""
    hello = warm.warm_up()
    try:
        write_frame_sync(sock, hello)
    except OSError:
        return False
    return True


def _setup_output() -> None:
    """Line-buffered logs so the server sees handler output as it happens."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
