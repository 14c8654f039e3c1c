"""House rules a reader relies on, checked over the sources: comments cite only this repo.

A docstring or comment that points at a document not in the repository (the
team's reference notes, "the contract, section N") sends a reader nowhere; the
sources cite files of this repo (bench/ results, docs/) or say the fact itself.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE_CITATIONS = re.compile(r"tech-notes\.md|contract §|§\d")


def test_no_source_cites_a_document_outside_the_repo() -> None:
    sources = [*ROOT.joinpath("jupyter_serve").rglob("*.py"), *ROOT.joinpath("tests").glob("*.py"),
               *ROOT.joinpath("bench").glob("*.py"),
               *ROOT.joinpath("labextension", "src").glob("*.ts")]  # fmt: skip
    cited = [f"{path.relative_to(ROOT)}:{number}"
             for path in sources if path != Path(__file__).resolve()
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if OUTSIDE_CITATIONS.search(line)]  # fmt: skip
    assert cited == []
