"""Generate the demo notebooks from their Markdown sources: `python notebooks/_build.py [DIR]`.

Each notebook is written in `notebooks/_src/<name>.md`, which reads as plain
Markdown (and diffs as plain text):

- a fenced block opened with ```` ```python ```` is a code cell; ```` ```python
  tags=a,b ```` gives it cell tags;
- the text between code cells is one Markdown cell; a line ``<!-- cell -->``
  splits it in two.

The `.ipynb` files are written without outputs and with stable cell ids (the
first tag, else a hash of the cell's text), so an edited source gives a small
notebook diff. Cells tagged `check-*` are the ones tests/test_notebooks.py
asserts on: keep those tags when editing.

The committed notebooks stay output-free (tests/test_notebooks.py checks that they are
exactly what this script writes). Running a tour and saving it (File > Save, or
JupyterLab's autosave) stores its outputs in the tracked file: `git restore notebooks/`,
or running this script, brings the clean file back. A tour's clean-up, when it has one
that would leave nothing to look at, is Markdown to copy, not a cell "Run All" runs.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "_src"
CODE_FENCE = "```python"
END_FENCE = "```"
SPLIT = "<!-- cell -->"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def parse(text: str) -> list[nbformat.NotebookNode]:
    """The cells of a Markdown source (see the module docstring)."""
    cells: list[nbformat.NotebookNode] = []
    prose: list[str] = []
    code: list[str] | None = None
    tags: list[str] = []
    for line in text.splitlines():
        if code is None and line.startswith(CODE_FENCE):
            cells += _markdown(prose)
            prose, code, tags = [], [], _tags(line[len(CODE_FENCE) :])
        elif code is not None and line == END_FENCE:
            cells.append(_code(code, tags))
            code = None
        elif code is not None:
            code.append(line)
        elif line.strip() == SPLIT:
            cells += _markdown(prose)
            prose = []
        else:
            prose.append(line)
    if code is not None:
        raise ValueError(f"unclosed {CODE_FENCE} block")
    return cells + _markdown(prose)


def _tags(info: str) -> list[str]:
    for word in info.split():
        if word.startswith("tags="):
            return [tag for tag in word[len("tags=") :].split(",") if tag]
    return []


def _markdown(lines: list[str]) -> list[nbformat.NotebookNode]:
    text = "\n".join(lines).strip("\n")
    return [new_markdown_cell(text)] if text else []


def _code(lines: list[str], tags: list[str]) -> nbformat.NotebookNode:
    cell = new_code_cell("\n".join(lines))
    if tags:
        cell.metadata["tags"] = tags
    return cell


def notebook(cells: list[nbformat.NotebookNode]) -> nbformat.NotebookNode:
    """A Python 3 notebook of `cells`, each given a stable, unique id."""
    seen: set[str] = set()
    for cell in cells:
        tags = cell.metadata.get("tags") or []
        base = tags[0] if tags else hashlib.sha1(cell.source.encode()).hexdigest()[:10]
        cell.id, count = base, 1
        while cell.id in seen:
            count += 1
            cell.id = f"{base}-{count}"
        seen.add(cell.id)
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def main(folder: Path = HERE) -> list[Path]:
    """Write `<folder>/<name>.ipynb` for every `_src/<name>.md`; the paths written."""
    written = []
    for source in sorted(SOURCES.glob("*.md")):
        nb = notebook(parse(source.read_text(encoding="utf-8")))
        nbformat.validate(nb)
        path = folder / f"{source.stem}.ipynb"
        nbformat.write(nb, path)
        written.append(path)
    return written


if __name__ == "__main__":
    for path in main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(path)
