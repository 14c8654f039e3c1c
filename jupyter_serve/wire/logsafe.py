"""What a serve log line may show of a request: no credential, no control character.

jupyter_server scrubs its own access log: a query argument whose name contains
`token`, `auth`, `key`, `code`, `state` or `xsrf` shows as `[secret]`. The serve
routes' own lines (a refused request, a failed prediction) apply the same rule with
`scrub_uri`, so `?token=...` never reaches a log beside the access line that hides it;
`hide_secrets` is the same rule for a url handed on (a `Referer` a handler sees).

Names a client chooses (a model name, a path segment, a version) arrive
percent-decoded and may carry newlines, ESC sequences or bidirectional overrides
that would forge or hide log lines on a terminal. `printable` escapes every
control and format character (Unicode categories Cc and Cf, and the line and
paragraph separators) as Python's `repr` writes it (`\\n`, `\\x1b`, `\\u202e`).
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import unquote_plus

SECRET_KEYS = ("token", "auth", "key", "code", "state", "xsrf")
"""Query argument names containing one of these are hidden (jupyter_server's list)."""

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
_PLAIN = re.compile(r"[\x20-\x7e]*")


def printable(text: str) -> str:
    """`text` with each control or format character escaped; plain ASCII comes back as is."""
    if _PLAIN.fullmatch(text):
        return text
    return "".join(_escaped(char) for char in text)


def _escaped(char: str) -> str:
    if unicodedata.category(char) not in _UNSAFE_CATEGORIES:
        return char
    return repr(char)[1:-1]


def scrub_uri(uri: str) -> str:
    """`uri` with every credential-looking query value replaced by `[secret]`, printable."""
    return printable(hide_secrets(uri))


def hide_secrets(url: str) -> str:
    """`url` with every credential-looking query value replaced by `[secret]` (a browser's
    `Referer` carries the page's `?token=` to every request it makes)."""
    path, mark, query = url.partition("?")
    if mark:
        query = "&".join(_scrubbed(part) for part in query.split("&"))
    return path + mark + query


def _scrubbed(part: str) -> str:
    name, equals, _value = part.partition("=")
    decoded = unquote_plus(name).lower()  # `%74oken` is read as `token` too
    if any(key in decoded for key in SECRET_KEYS):
        return f"{name}{equals}[secret]"
    return part
