"""How a failed `%serve` shows in the notebook: one line, no traceback.

The honest mistakes (the server's error JSON, a server that does not answer, no
server found, a missing `--file`, malformed `--json`, a folder to register) print

    <What> failed: HTTP <status> <TorchServe's message> (cause: <one line>)
    <What> failed: no answer from <url>: <reason>
    <What> failed: <message>

and the magic returns None. `%serve --debug ...` raises them instead, traceback and
all; anything else (a bug) always raises.
"""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .client import NotAnArchive, ServeClientError, ServerNotFound

HONEST_MISTAKES = (ServeClientError, ServerNotFound, NotAnArchive, OSError, json.JSONDecodeError)


def failure_line(what: str, error: BaseException, url: str | None = None) -> str:
    """The one line saying that `what` failed, and why."""
    if isinstance(error, ServeClientError):
        cause = f" (cause: {error.cause})" if error.cause else ""
        return f"{what} failed: HTTP {error.status} {error.message}{cause}"
    if isinstance(error, (urllib.error.URLError, ConnectionError, TimeoutError)):
        reason = getattr(error, "reason", None) or error
        return f"{what} failed: no answer from {url or 'the server'}: {reason}"
    if isinstance(error, json.JSONDecodeError):
        return f"{what} failed: --json is not JSON: {error}"
    return f"{what} failed: {error}"


@contextmanager
def one_line_failures(
    what: str, server_url: Callable[[], str | None], *, debug: bool = False
) -> Iterator[None]:
    """Print an honest mistake raised in the block as `failure_line` (raise it if `debug`);
    `server_url` says, once it failed, which server did not answer (`connect` changes it)."""
    try:
        yield
    except HONEST_MISTAKES as error:
        if debug:
            raise
        print(failure_line(what, error, server_url()))
