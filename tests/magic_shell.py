"""`magic_shell`: an IPython shell with jupyter_serve's magics loaded, as in a kernel.

Pointed at a server (`point_at`, what `%serve connect` does) when one is given; the
shell instance is cleared when the block ends. Each magics test module's `shell`
fixture adds its own working folder around it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from IPython.core.interactiveshell import InteractiveShell

from jupyter_serve.kernel.client import ServerInfo


def point_at(shell: InteractiveShell, server: ServerInfo) -> None:
    shell.magics_manager.registry["ServeMagics"].server = server


@contextmanager
def magic_shell(server: ServerInfo | None = None) -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    try:
        ip.run_line_magic("load_ext", "jupyter_serve")
        if server is not None:
            point_at(ip, server)
        yield ip
    finally:
        InteractiveShell.clear_instance()
