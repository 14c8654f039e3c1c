"""Per-model requirements: real pip runs against wheels built in tmp_path (no network)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from jupyter_serve.server import deps
from jupyter_serve.wire.errors import BadRequest, ServeError


def build_wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel whose module records its version."""
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(path, text)
    return wheel


def import_from(target: Path, module: str) -> str:
    """`module.VERSION` as a fresh interpreter sees it with only `target` added to sys.path."""
    code = (
        f"import sys; sys.path.insert(0, {str(target)!r}); import {module}; print({module}.VERSION)"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    build_wheel(folder, "tinydep", "0.1")
    # --no-index: pip never looks at the network; a relative path resolves in the model folder.
    (folder / "requirements.txt").write_text("--no-index\n./tinydep-0.1-py3-none-any.whl\n")
    return folder


def install(model_dir: Path, target: Path, python: str = sys.executable) -> Path:
    return asyncio.run(deps.install_requirements(model_dir / "requirements.txt", target, python))


def test_installs_into_the_target_only(model_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "deps" / "model-1.0"
    assert install(model_dir, target) == target
    assert import_from(target, "tinydep") == "0.1"
    assert (target / deps.MARKER).is_file()
    with pytest.raises(ModuleNotFoundError):
        __import__("tinydep")  # not in the server's environment
    assert not list(target.parent.glob(".model-1.0-*"))  # staging folder cleaned up


def test_same_requirements_are_not_installed_again(model_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "deps"
    install(model_dir, target)
    # pip would now fail (the wheel is gone): a skipped install succeeds.
    (model_dir / "tinydep-0.1-py3-none-any.whl").unlink()
    assert install(model_dir, target) == target
    assert import_from(target, "tinydep") == "0.1"


def test_changed_requirements_replace_the_old_install(model_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "deps"
    install(model_dir, target)
    build_wheel(model_dir, "otherdep", "2.0")
    (model_dir / "requirements.txt").write_text("--no-index\n./otherdep-2.0-py3-none-any.whl\n")
    install(model_dir, target)
    assert import_from(target, "otherdep") == "2.0"
    assert not (target / "tinydep").exists()
    assert deps.installed_digest(target) == deps.requirements_digest(
        model_dir / "requirements.txt", sys.executable
    )


def test_pip_failure_reports_pips_message(model_dir: Path, tmp_path: Path) -> None:
    (model_dir / "requirements.txt").write_text("--no-index\n./does-not-exist-pkg\n")
    target = tmp_path / "deps"
    with pytest.raises(ServeError) as caught:
        install(model_dir, target)
    assert caught.value.status_code == 500
    assert "does-not-exist-pkg" in caught.value.message
    assert "pip exited with 1" in caught.value.message
    assert "does not exist" in caught.value.message  # pip's own explanation
    assert not target.exists()
    assert not list(tmp_path.glob(".deps-*"))


def test_failed_reinstall_keeps_the_previous_install(model_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "deps"
    install(model_dir, target)
    (model_dir / "requirements.txt").write_text("--no-index\n./does-not-exist-pkg\n")
    with pytest.raises(ServeError):
        install(model_dir, target)
    assert import_from(target, "tinydep") == "0.1"


def test_missing_interpreter_is_a_serve_error(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ServeError, match="Cannot run pip with /nonexistent/python"):
        install(model_dir, tmp_path / "deps", python="/nonexistent/python")


def test_missing_requirements_file_is_a_bad_request(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="Requirements file not found"):
        install(tmp_path, tmp_path / "deps")


def test_redirecting_pip_variables_are_dropped(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PIP_USER=1 makes `pip install --target` fail ("Can not combine '--user' and '--target'").
    monkeypatch.setenv("PIP_USER", "1")
    target = tmp_path / "deps"
    install(model_dir, target)
    assert import_from(target, "tinydep") == "0.1"


def test_timeout_kills_pip(model_dir: Path, tmp_path: Path) -> None:
    hang = tmp_path / "hang.py"
    hang.write_text("import sys, time\ntime.sleep(600)\n")  # a "python" whose pip never ends
    fake_python = tmp_path / "python"
    fake_python.write_text(f"#!/bin/sh\nexec {sys.executable} {hang}\n")
    fake_python.chmod(0o755)
    coroutine = deps.install_requirements(
        model_dir / "requirements.txt", tmp_path / "deps", str(fake_python), timeout=0.5
    )
    with pytest.raises(ServeError, match=r"timed out after 0.5 s"):
        asyncio.run(coroutine)


def test_pip_never_sees_the_servers_credentials(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip (and a source package's setup code) runs without what workers never get."""
    seen = tmp_path / "environment"
    recorder = tmp_path / "python"  # a "python" whose pip records its environment
    recorder.write_text(f"#!/bin/sh\nenv > {seen}\n")
    recorder.chmod(0o755)
    for name in ("JUPYTER_TOKEN", "JUPYTERHUB_API_TOKEN", "MY_PRIVATE_THING"):
        monkeypatch.setenv(name, "s3cr3t")
    monkeypatch.setenv("KEPT_FOR_PIP", "1")
    coroutine = deps.install_requirements(model_dir / "requirements.txt", tmp_path / "deps",
                                          str(recorder), withhold=("my_private_*",))  # fmt: skip
    asyncio.run(coroutine)
    names = {line.split("=", 1)[0] for line in seen.read_text().splitlines()}
    assert "KEPT_FOR_PIP" in names
    assert not {"JUPYTER_TOKEN", "JUPYTERHUB_API_TOKEN", "MY_PRIVATE_THING"} & names
