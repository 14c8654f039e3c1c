"""Kernelspec interpreters, read from real kernelspecs installed into a temporary JUPYTER_PATH."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_serve.server.kernels import python_for_kernel
from jupyter_serve.wire.errors import BadRequest


@pytest.fixture
def jupyter_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty kernelspec folder that is the only one jupyter_client looks in besides defaults."""
    root = tmp_path / "jupyter"
    (root / "kernels").mkdir(parents=True)
    monkeypatch.setenv("JUPYTER_PATH", str(root))
    return root


def add_kernel(root: Path, name: str, argv: list[str], **extra: Any) -> None:
    folder = root / "kernels" / name
    folder.mkdir()
    spec = {"argv": argv, "display_name": name, "language": "python", **extra}
    (folder / "kernel.json").write_text(json.dumps(spec))


def env_python(tmp_path: Path, name: str = "python3") -> Path:
    """A python executable inside its own "environment" bin folder (a symlink to this one)."""
    bin_dir = tmp_path / "env" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / name
    link.symlink_to(sys.executable)
    return link


def test_absolute_interpreter_is_returned_unresolved(jupyter_path: Path, tmp_path: Path) -> None:
    python = env_python(tmp_path)
    add_kernel(jupyter_path, "torch-env", [str(python), "-m", "ipykernel_launcher", "-f", "{c}"])
    # The symlink itself, never its target: resolving it would leave the environment.
    assert python_for_kernel("torch-env") == str(python)


def test_bare_python_names_are_the_servers_interpreter(jupyter_path: Path, tmp_path: Path) -> None:
    env_python(tmp_path)
    spec_env = {"PATH": str(tmp_path / "env" / "bin")}
    add_kernel(jupyter_path, "plain", ["python3", "-m", "ipykernel_launcher"], env=spec_env)
    # jupyter_client starts "python"/"python3" as sys.executable, whatever the PATH says.
    assert python_for_kernel("plain") == sys.executable


def test_other_names_resolve_through_the_kernels_path(jupyter_path: Path, tmp_path: Path) -> None:
    python = env_python(tmp_path, "python3.99")
    spec_env = {"PATH": f"{tmp_path / 'env' / 'bin'}:${{PATH}}"}
    add_kernel(jupyter_path, "pinned", ["python3.99", "-m", "ipykernel_launcher"], env=spec_env)
    assert python_for_kernel("pinned") == str(python)


def test_env_launcher_resolves_its_program(jupyter_path: Path, tmp_path: Path) -> None:
    python = env_python(tmp_path)
    spec_env = {"PATH": str(tmp_path / "env" / "bin")}
    argv = ["/usr/bin/env", "-u", "X", "python3", "-m", "ipykernel_launcher"]
    add_kernel(jupyter_path, "via-env", argv, env=spec_env)
    assert python_for_kernel("via-env") == str(python)


def test_unknown_kernel_lists_the_available_ones(jupyter_path: Path, tmp_path: Path) -> None:
    add_kernel(jupyter_path, "alpha", [str(env_python(tmp_path)), "-m", "ipykernel_launcher"])
    with pytest.raises(BadRequest, match='No such kernel: "nope"') as caught:
        python_for_kernel("nope")
    assert "alpha" in caught.value.message
    assert caught.value.status_code == 400


def test_non_python_kernel_is_refused(jupyter_path: Path, tmp_path: Path) -> None:
    add_kernel(jupyter_path, "ir", ["R", "--slave"], language="R")
    with pytest.raises(BadRequest, match='Kernel "ir" runs R, not Python'):
        python_for_kernel("ir")


def test_launcher_that_is_not_python_is_refused(jupyter_path: Path) -> None:
    add_kernel(jupyter_path, "conda", ["conda", "run", "-n", "x", "python", "-m", "ipykernel"])
    with pytest.raises(BadRequest, match="does not start a Python interpreter directly"):
        python_for_kernel("conda")


def test_missing_interpreter_is_refused(jupyter_path: Path, tmp_path: Path) -> None:
    add_kernel(jupyter_path, "gone", [str(tmp_path / "nowhere" / "python3"), "-m", "x"])
    with pytest.raises(BadRequest, match="which is not an executable"):
        python_for_kernel("gone")
    add_kernel(jupyter_path, "offpath", ["python3.98", "-m", "x"], env={"PATH": str(tmp_path)})
    with pytest.raises(BadRequest, match="not on its PATH"):
        python_for_kernel("offpath")
