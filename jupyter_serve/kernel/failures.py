"""How a failed `%serve` shows in the notebook: one line, no traceback.

The honest mistakes (the server's error JSON, a server that does not answer, no
server found, a missing `--file`, malformed `--json`, a folder to register) print

    <What> failed: HTTP <status> <TorchServe's message> (cause: <one line>) (<hint>)
    <What> failed: no answer from <url>: <reason>
    <What> failed: <message>

and the magic returns None. `%serve --debug ...` raises them instead, traceback and
all; anything else (a bug) always raises. `%mar` and `%%handler --serve` print theirs
the same way (`%mar --debug ...` raises), an archive the archiver refuses
(`ArchiveError`, `FileNotFoundError`) included.

The hint says what to do: the client's ("did you mean mnistnb?", client.py), the
magic's (a version already registered), or for every 403 how to give a token
(`TOKEN_HINT`; the CLI's own words are `CLI_TOKEN_HINT`).
"""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from jupyter_serve.kernel.client import NotAnArchive, ServeClientError, ServerNotFound
from jupyter_serve.wire.errors import ArchiveError

HONEST_MISTAKES = (
    ServeClientError, ServerNotFound, NotAnArchive, ArchiveError, OSError, json.JSONDecodeError
)  # fmt: skip
WHERE_TOKENS_ARE = "the ?token= part of the URL the server printed; `jupyter server list` shows it"
TOKEN_HINT = f"give the server's token: %serve connect URL --token TOKEN ({WHERE_TOKENS_ARE})"
CLI_TOKEN_HINT = (
    f"give the server's token: --token TOKEN or $JUPYTER_SERVE_TOKEN ({WHERE_TOKENS_ARE})"
)


def hint_of(error: ServeClientError, token_hint: str = TOKEN_HINT) -> str:
    """What to do about an error answer: its own hint, else for a 403 how to give a token."""
    return error.hint or (token_hint if error.status == 403 else "")


def answer_line(error: ServeClientError, token_hint: str = TOKEN_HINT) -> str:
    """`HTTP <status> <message> (cause: ...) (<hint>)`: an error answer in one line."""
    cause = f" (cause: {error.cause})" if error.cause else ""
    hint = hint_of(error, token_hint)
    return f"HTTP {error.status} {error.message}{cause}" + (f" ({hint})" if hint else "")


def failure_line(what: str, error: BaseException, url: str | None = None) -> str:
    """The one line saying that `what` failed, and why."""
    if isinstance(error, ServeClientError):
        return f"{what} failed: {answer_line(error)}"
    if isinstance(error, (urllib.error.URLError, ConnectionError, TimeoutError)):
        reason = getattr(error, "reason", None) or error
        return f"{what} failed: no answer from {url or 'the server'}: {reason}"
    if isinstance(error, json.JSONDecodeError):
        return f"{what} failed: --json is not JSON: {error}"
    return f"{what} failed: " + " ".join(str(error).split("\n"))  # the archiver's are several


@contextmanager
def one_line_failures(
    what: str, server_url: Callable[[], str | None] = lambda: None, *, debug: bool = False
) -> Iterator[None]:
    """Print an honest mistake raised in the block as `failure_line` (raise it if `debug`);
    `server_url` says, once it failed, which server did not answer (`connect` changes it)."""
    try:
        yield
    except HONEST_MISTAKES as error:
        if debug:
            raise
        print(failure_line(what, error, server_url()))
