"""`PACKAGE_ROOT` (jupyter_serve/_paths.py): the folder a worker needs on its path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jupyter_serve._paths import PACKAGE_ROOT


def test_package_root_on_pythonpath_makes_the_package_importable(tmp_path: Path) -> None:
    # -S skips site-packages (and with it the editable install): only PYTHONPATH can help.
    command = [sys.executable, "-S", "-c", "import jupyter_serve; print(jupyter_serve.__file__)"]
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    without = subprocess.run(command, cwd=tmp_path, env=bare, capture_output=True, text=True)
    assert without.returncode != 0
    with_path = {**bare, "PYTHONPATH": PACKAGE_ROOT}
    found = subprocess.run(command, cwd=tmp_path, env=with_path, capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).parent == Path(PACKAGE_ROOT) / "jupyter_serve"
