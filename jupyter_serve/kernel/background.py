"""A jupyter_serve server of the kernel's own, for when no Jupyter server is around.

Plain IPython, VS Code or other front ends run kernels without a Jupyter server.
`start_background_server()` then starts `jupyter serve` in a child process on
loopback, on a free port, with a fresh random token, and returns once the
server says it is listening. The server is stopped when the kernel exits.
"""

from __future__ import annotations

import atexit
import secrets
import socket
import subprocess
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_serve.kernel.client import ServerInfo

# ServeApp's line once the server's event loop runs (jupyter_server's own "is running at"
# comes before the loop starts, and a request sent right then was seen refused here).
READY_LINE = "startup models serving"
START_TIMEOUT = 120.0  # seconds


class BackgroundServerError(RuntimeError):
    """The background server exited or did not come up."""


@dataclass
class BackgroundServer:
    """A running `jupyter serve` child process and where it listens."""

    info: ServerInfo
    process: subprocess.Popen[str]
    output: deque[str] = field(default_factory=lambda: deque(maxlen=200))

    def stop(self, grace: float = 10.0) -> None:
        """Stop the server (its extension stops the workers)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_background_server(
    root: Path | None = None, extra_args: tuple[str, ...] = ()
) -> BackgroundServer:
    """Start `jupyter serve` on loopback with a fresh token; return once it listens."""
    port, token = free_port(), secrets.token_urlsafe(24)
    argv = [
        sys.executable, "-m", "jupyter_serve.cli", "--no-browser", "--ip=127.0.0.1",
        f"--port={port}", f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root or Path.cwd()}", *extra_args,
    ]  # fmt: skip
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=root
    )
    info = ServerInfo(f"http://127.0.0.1:{port}/", token, "background server")
    server = BackgroundServer(info, process)
    ready = threading.Event()
    threading.Thread(target=_drain, args=(server, ready), daemon=True).start()
    if not ready.wait(START_TIMEOUT) or process.poll() is not None:
        server.stop()
        tail = "\n".join(server.output)
        raise BackgroundServerError(f"jupyter serve did not start:\n{tail}")
    atexit.register(server.stop)
    return server


def _drain(server: BackgroundServer, ready: threading.Event) -> None:
    """Keep reading the server's log (a full pipe would block it); flag the ready line."""
    assert server.process.stderr is not None
    for line in server.process.stderr:
        server.output.append(line.rstrip())
        if READY_LINE in line:
            ready.set()
    ready.set()  # the process ended: wake the starter, which sees poll() is not None
