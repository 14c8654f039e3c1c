"""How the kernel side finds its Jupyter server: `discover` returns a `ServerInfo`.

Magics and widgets run in a kernel, a different process from the Jupyter server,
and need its url and token. Discovery order:

1. explicit arguments (`%serve connect URL --token T`, `--url U --token T`). A url
   without a token takes the token of the running server's runtime file at that
   address (`localhost`, `127.0.0.1` and `::1` are one host; a trailing slash, a
   page such as `lab` or `tree` after the base_url, and a pasted `?token=` are
   understood), else ``JUPYTER_SERVE_TOKEN``;
2. the environment: ``JUPYTER_SERVE_URL`` and ``JUPYTER_SERVE_TOKEN``;
3. the runtime file of the server that started this kernel:
   ``jpserver-$JPY_PARENT_PID.json`` in Jupyter's runtime directory;
4. a scan of every ``jpserver-*.json``, keeping the server whose ``/api/kernels``
   lists this kernel's id;
5. outside a kernel (`jupyter serve keys`, ``any_server=True``): the one running
   server whose runtime file is there (several: say which with ``--url``).

The runtime files are read directly: importing `jupyter_server.serverapp` in a
kernel costs seconds. Talking to the server once found is
client.py's `ServeClient` (which re-exports these names); step 4 asks each candidate
for its kernels with the `kernels` function `discover` is given (client.py's `discover`
gives one that asks through `ServeClient`; without it step 4 is skipped).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "PREFIX",
    "TOKEN_ENV",
    "URL_ENV",
    "ServerInfo",
    "ServerNotFound",
    "current_kernel_id",
    "discover",
    "runtime_dir",
]

URL_ENV = "JUPYTER_SERVE_URL"
TOKEN_ENV = "JUPYTER_SERVE_TOKEN"
PREFIX = "serve"


class ServerNotFound(Exception):
    """No Jupyter server with jupyter_serve could be found."""


@dataclass(frozen=True)
class ServerInfo:
    """Where a Jupyter server listens (`url` ends with its base_url) and its token."""

    url: str
    token: str = ""
    source: str = "explicit"

    @property
    def serve_url(self) -> str:
        return self.url.rstrip("/") + "/" + PREFIX + "/"


def runtime_dir() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir  # light: no server import

    return Path(jupyter_runtime_dir())


def _read_runtime_file(path: Path) -> ServerInfo | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    url = data.get("url")
    if not isinstance(url, str):
        return None
    return ServerInfo(url, str(data.get("token") or ""), f"runtime file {path.name}")


def discover(
    url: str | None = None,
    token: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    runtime: Path | None = None,
    kernel_id: str | None = None,
    any_server: bool = False,
    kernels: Callable[[ServerInfo], set[str]] | None = None,
) -> ServerInfo:
    """The Jupyter server this kernel should talk to (see the module docstring)."""
    environ = os.environ if env is None else env
    folder = runtime or runtime_dir()
    if url:
        return _at_address(url, token, environ.get(TOKEN_ENV, ""), folder)
    if environ.get(URL_ENV):
        return ServerInfo(environ[URL_ENV], token or environ.get(TOKEN_ENV, ""), "environment")
    parent = environ.get("JPY_PARENT_PID")
    if parent:
        found = _read_runtime_file(folder / f"jpserver-{parent}.json")
        if found is not None:
            return found
    if kernel_id and kernels is not None:
        for candidate in _runtime_files(folder):
            if kernel_id in kernels(candidate):
                return candidate
    if any_server:
        return _only_running_server(folder)
    raise ServerNotFound(
        "No Jupyter server found: set JUPYTER_SERVE_URL and JUPYTER_SERVE_TOKEN, "
        "or use `%serve connect URL --token TOKEN`."
    )


def _runtime_files(folder: Path) -> Iterable[ServerInfo]:
    for path in sorted(folder.glob("jpserver-*.json")):
        info = _read_runtime_file(path)
        if info is not None:
            yield info


def _running_servers(folder: Path) -> list[ServerInfo]:
    """The servers whose runtime files name a live process."""
    running = []
    for path in sorted(folder.glob("jpserver-*.json")):
        info = _read_runtime_file(path)
        if info is not None and _alive(path.stem.removeprefix("jpserver-")):
            running.append(info)
    return running


def _at_address(url: str, token: str | None, env_token: str, folder: Path) -> ServerInfo:
    """The server at `url`: a `?token=` in it, else `token`, else the token of the running
    server whose base url `url` starts with (its url replaces `url`), else `env_token`."""
    pasted = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("token", [""])[0]
    token = token or pasted
    given = _address(url)
    matches = [info for info in _running_servers(folder) if _under(given, _address(info.url))]
    if not matches:
        return ServerInfo(url.split("?", 1)[0], token or env_token, "explicit")
    server = max(matches, key=lambda info: len(_address(info.url)[1]))  # the longest base_url
    return ServerInfo(server.url, token or server.token, "explicit")


Address = tuple[tuple[str, str, "int | None"], str]
LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::", ""}
DEFAULT_PORTS = {"http": 80, "https": 443}


def _address(url: str) -> Address:
    """(scheme, host, port) with every loopback name as one, and the path ending in '/'."""
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    host = (parts.hostname or "").lower()
    host = "loopback" if host in LOOPBACK else host
    try:
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:  # a port that is not a number: matches nothing
        port = None
    return (parts.scheme, host, port), parts.path.rstrip("/") + "/"


def _under(given: Address, server: Address) -> bool:
    """`given` is at the server's address, on its base url or a page below it."""
    return given[0] == server[0] and given[1].startswith(server[1])


def _only_running_server(folder: Path) -> ServerInfo:
    """The one server whose runtime file names a live process (a shell has no kernel)."""
    running = _running_servers(folder)
    if len(running) == 1:
        return running[0]
    if not running:
        raise ServerNotFound(
            "No running Jupyter server found: pass --url and --token, or set "
            "JUPYTER_SERVE_URL and JUPYTER_SERVE_TOKEN."
        )
    urls = ", ".join(info.url for info in running)
    raise ServerNotFound(f"Several Jupyter servers are running ({urls}): pick one with --url.")


def _alive(pid: str) -> bool:
    """True unless the process of a runtime file (`jpserver-<pid>.json`) is gone."""
    if not pid.isdigit() or os.name != "posix":
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def current_kernel_id() -> str | None:
    """This kernel's id, from its connection file name (`kernel-<id>.json`)."""
    try:
        from ipykernel.connect import get_connection_file
    except ImportError:
        return None
    try:
        name = Path(get_connection_file()).name
    except Exception:  # no running kernel app (plain IPython)
        return None
    return name[len("kernel-") : -len(".json")] if name.startswith("kernel-") else None
