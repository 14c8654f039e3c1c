"""``python -m jupyter_serve.worker --fd N [--torch-threads K]``: one model's worker.

`N` is an inherited, connected AF_UNIX stream socket (one end of a socketpair
passed with `pass_fds`). stdout and stderr carry only log text; frames travel on
the socket. Exit status: 0 on EOF, 1 after a failed load, 2 on a protocol error.

`run` is the whole worker once its socket is there: a worker forked by the
worker factory (`factory`) calls it too, so both kinds serve alike.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys

from jupyter_serve.wire.protocol import ProtocolError
from jupyter_serve.worker import compat
from jupyter_serve.worker.service import ModelService, serve
from jupyter_serve.worker.startpath import drop_start_entry

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
    return p


def main(argv: list[str] | None = None) -> int:
    drop_start_entry()
    args = parser().parse_args(argv)
    return run(args.fd, args.torch_threads)


def run(fd: int, torch_threads: int | None = None) -> int:
    """Serve one model over the connected socket `fd` until EOF; the exit status."""
    _setup_output()
    compat.install()
    service = ModelService(torch_threads=torch_threads, chdir=True)
    with socket.socket(fileno=fd) as sock:
        try:
            return serve(sock, service)
        except ProtocolError as exc:
            print(f"jupyter_serve worker: protocol error: {exc}", file=sys.stderr, flush=True)
            return 2


def _setup_output() -> None:
    """Line-buffered logs so the server sees handler output as it happens."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
