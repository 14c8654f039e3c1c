"""server/registry/names.py: the one rule for names given to the model store, and NFC twins."""

from __future__ import annotations

import asyncio
import unicodedata
from pathlib import Path

import pytest

from jupyter_serve.server.registry.names import UNSHOWN_CATEGORIES, name_problem, nfc, twin_in
from jupyter_serve.server.registry.sources import locate
from jupyter_serve.wire.errors import BadRequest

COMPOSED, DECOMPOSED = "\u00e9.mar", "e\u0301.mar"  # "é.mar" twice


@pytest.mark.parametrize("char", ["\x00", "\t", "\x7f", "\x9b", "\u061c", "\u200e", "\u202e",
                                  "\u2066", "\u200b", "\u2028", "\u2029", "\ufeff"])  # fmt: skip
def test_characters_that_are_not_glyphs_are_refused(char: str) -> None:
    assert unicodedata.category(char) in UNSHOWN_CATEGORIES
    problem = name_problem(f"a{char}b.mar")
    assert problem is not None
    assert problem.startswith(f"it contains U+{ord(char):04X} (")


def test_a_leading_dash_is_refused_and_ordinary_names_pass() -> None:
    assert name_problem("-x.mar") == "it starts with '-', which commands read as an option"
    for name in ("x.mar", "a-b.mar", "modèle.mar", "模型.tar.gz", "emoji\U0001f600.zip", " x.mar"):
        assert name_problem(name) is None


def test_twins_are_other_spellings_of_the_same_nfc_name(tmp_path: Path) -> None:
    assert nfc(DECOMPOSED) == COMPOSED
    assert twin_in(tmp_path / "missing", COMPOSED) is None
    (tmp_path / DECOMPOSED).write_bytes(b"")
    assert twin_in(tmp_path, COMPOSED) == DECOMPOSED
    assert twin_in(tmp_path, DECOMPOSED) is None  # the very name: not a twin
    assert twin_in(tmp_path, "other.mar") is None


@pytest.mark.parametrize(
    "url", ["x\u202egpj.mar", "-x.mar", "https://example.org/\u200bx.mar", "/abs/x\x7f.mar"]
)
def test_a_register_url_breaking_the_rule_is_400_before_any_lookup(
    tmp_path: Path, url: str
) -> None:
    with pytest.raises(BadRequest) as raised:
        asyncio.run(locate(url, tmp_path))
    assert raised.value.to_json()["type"] == "BadRequestException"
    assert raised.value.message.startswith(f"Invalid model url {url!r}: it ")


def test_a_model_version_must_show_as_what_it_is() -> None:
    from jupyter_serve.server.models import ModelSpec

    base = {"model_name": "m", "version": "1.0", "model_dir": "/tmp/m", "handler": "h.py",
            "manifest": {}}  # fmt: skip
    assert ModelSpec(**base).version == "1.0"
    for version in ("1.0\u202e", "1\x1b[31m", "v\n2"):
        with pytest.raises(BadRequest, match="not shown as a glyph"):
            ModelSpec(**{**base, "version": version})


def test_a_downloaded_archive_is_named_by_the_same_rule(tmp_path: Path) -> None:
    """Refused before any connection is made (the address would refuse one anyway)."""
    from jupyter_serve.server.registry.download import download

    (tmp_path / "caf\u00e9.mar").write_bytes(b"x")
    allowed = [r"http://127\.0\.0\.1:9/.*"]
    for name, problem in (("-rf.mar", "starts with '-'"),
                          ("cafe\u0301.mar", "looks like another file")):  # fmt: skip
        with pytest.raises(BadRequest, match=problem):
            download(f"http://127.0.0.1:9/{name}", tmp_path, allowed, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["caf\u00e9.mar"]


def test_the_openapi_patterns_take_exactly_the_names_the_rule_takes() -> None:
    """For every character of the Basic Multilingual Plane (all an ECMA pattern can name)."""
    import re

    from jupyter_serve.server.http.openapi_parts import PATTERNS

    url, file_name = (re.compile(PATTERNS[name]()) for name in ("url", "file_name"))
    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        for name in (f"a{chr(code)}b.mar", f"{chr(code)}ab.mar"):
            ruled_out = name_problem(name) is not None
            assert (url.match(name) is None) == ruled_out, repr(name)
            not_a_file = ruled_out or name.startswith(".") or "/" in name or "\\" in name
            assert (file_name.match(name) is None) == not_a_file, repr(name)
