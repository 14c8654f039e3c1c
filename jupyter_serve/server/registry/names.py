"""The rule for names a client gives the model store: each shows as what it is, once.

A store name (`PUT model-store/{file}`, server/http/store.py) becomes a file, and it and
a register url (`POST models?url=...`, server/registry/sources.py) are shown back to
people: in the Serving panel, in `describe`'s `modelUrl`, in a terminal's `ls`. So
both are refused (`name_problem`) when

* a character is not a glyph: Unicode categories Cc (controls: DEL, ESC, CR...),
  Cf (formats: the right-to-left override U+202E, which shows `x` U+202E `gpj.mar`
  as `xram.jpg`; zero-width joiners and spaces) and Zl, Zp (line and paragraph
  separators), which reorder, hide or break what is shown;
* the name starts with `-`: an option, not a file, to the `ls`, `rm` or `tar` run
  in the store.

Two spellings of one text (`é` as U+00E9, or as `e` and U+0301) look the same on
screen but are two file names on Linux. A new store name is saved in Unicode NFC
(`nfc`), and one whose NFC form is another entry's, spelled differently, is that
entry's twin (`twin_in`): two files no one can tell apart.

Standard library only (the archive code and the workers may import the registry).
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from pathlib import Path

__all__ = [
    "UNSHOWN_CATEGORIES",
    "name_pattern",
    "name_problem",
    "nfc",
    "twin_in",
    "unshown_character",
]

UNSHOWN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def unshown_character(text: str) -> str | None:
    """Why `text` does not show as what it is (a character that is no glyph), else None;
    model versions are held to this too (models.py)."""
    for char in text:
        if unicodedata.category(char) in UNSHOWN_CATEGORIES:
            what = unicodedata.name(char, "a control character")
            return f"it contains U+{ord(char):04X} ({what}), which is not shown as a glyph"
    return None


def name_problem(name: str) -> str | None:
    """Why `name` is refused (module docstring), in words for an error message; else None."""
    unshown = unshown_character(name)
    if unshown:
        return unshown
    if name.startswith("-"):
        return "it starts with '-', which commands read as an option"
    return None


def nfc(name: str) -> str:
    """`name` in Unicode normalisation form C, how new store names are saved."""
    return unicodedata.normalize("NFC", name)


def twin_in(folder: Path, name: str) -> str | None:
    """An entry of `folder` spelled differently from `name` with the same NFC form."""
    wanted = nfc(name)
    try:
        entries = os.listdir(folder)
    except FileNotFoundError:
        return None
    return next((entry for entry in entries if entry != name and nfc(entry) == wanted), None)


def name_pattern(first_excluded: str = "", then_excluded: str = "", tail: str = "") -> str:
    """A regex (the OpenAPI document's `pattern`) of the names `name_problem` lets through,
    with `first_excluded` more characters refused first, `then_excluded` anywhere (inside
    of a character class, escaped), and `tail` at the end."""
    unshown = _unshown_class()
    return f"^[^\\-{first_excluded}{then_excluded}{unshown}][^{then_excluded}{unshown}]*{tail}$"


@functools.lru_cache(maxsize=1)
def _unshown_class() -> str:
    """The characters of `UNSHOWN_CATEGORIES` as ranges inside a regex character class, those
    of the Basic Multilingual Plane only: a JSON Schema pattern is an ECMA 262 regex, whose
    character classes (without the `u` flag) hold no character beyond U+FFFF."""
    codes = [code for code in range(0x10000)
             if not 0xD800 <= code <= 0xDFFF
             and unicodedata.category(chr(code)) in UNSHOWN_CATEGORIES]  # fmt: skip
    ranges: list[list[int]] = []
    for code in codes:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "".join(re.escape(chr(low)) + ("-" + re.escape(chr(high)) if high > low else "")
                   for low, high in ranges)  # fmt: skip
