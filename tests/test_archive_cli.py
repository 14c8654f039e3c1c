"""`jupyter-serve-archiver` end to end in a subprocess, as a build script would call it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_serve.archive import inspect_archive

ARCHIVER = Path(sys.executable).with_name("jupyter-serve-archiver")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ARCHIVER), *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_build_with_torch_model_archiver_flags(model_inputs: Path) -> None:
    result = run(
        "--model-name", "cli_model", "-v", "1.0", "--handler", "handler.py",
        "--serialized-file", "weights.pt", "--model-file", "model.py",
        "--extra-files", "index_to_name.json,extra", "-r", "requirements.txt",
        "-c", "model-config.yaml", "--export-path", ".", cwd=model_inputs,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    listing = inspect_archive(model_inputs / "cli_model.mar")
    assert listing.manifest is not None
    assert listing.manifest.model.config_file == "model-config.yaml"
    assert listing.manifest.model.requirements_file == "requirements.txt"
    assert "nested/merges.txt" in {name for name, _ in listing.files}


def test_existing_output_without_force_exits_1_and_keeps_it(model_inputs: Path) -> None:
    args = ("--model-name", "twice", "-v", "1", "--handler", "handler.py")
    assert run(*args, cwd=model_inputs).returncode == 0
    before = (model_inputs / "twice.mar").read_bytes()
    again = run(*args, cwd=model_inputs)
    assert again.returncode == 1
    assert "twice.mar already exists" in again.stderr
    assert "--force/-f" in again.stderr
    assert "Traceback" not in again.stderr
    assert (model_inputs / "twice.mar").read_bytes() == before
    forced = run(*args, "-f", cwd=model_inputs)
    assert forced.returncode == 0
    assert "Overwriting" in forced.stderr


@pytest.mark.parametrize(
    ("args", "missing"),
    [
        (("-v", "1", "--handler", "handler.py"), "--model-name"),
        (("--model-name", "m", "--handler", "handler.py"), "-v/--version"),
        (("--model-name", "m", "-v", "1"), "--handler"),
    ],
)
def test_missing_required_flag_exits_2(args: tuple[str, ...], missing: str, tmp_path: Path) -> None:
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert "required" in result.stderr
    assert missing in result.stderr


def test_serialized_file_is_optional(model_inputs: Path) -> None:
    result = run("--model-name", "nofile", "-v", "1", "--handler", "handler.py", cwd=model_inputs)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--serialized-file", "missing.pt"),
        ("--model-file", "missing.py"),
        ("--extra-files", "missing.json"),
        ("--handler", "missing_handler.py"),
    ],
)
def test_missing_input_exits_1_with_its_name(args: tuple[str, ...], model_inputs: Path) -> None:
    base = ["--model-name", "gone", "-v", "1"]
    if args[0] != "--handler":
        base += ["--handler", "handler.py"]
    result = run(*base, *args, cwd=model_inputs)
    assert result.returncode == 1
    assert args[1] in result.stderr
    assert not (model_inputs / "gone.mar").exists()


def test_bad_choice_exits_2(model_inputs: Path) -> None:
    result = run("--model-name", "m", "-v", "1", "--handler", "h.py", "--runtime", "java",
                 cwd=model_inputs)  # fmt: skip
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


def test_inspect_prints_manifest_and_files(model_inputs: Path) -> None:
    run("--model-name", "seen", "-v", "4.2", "--handler", "handler.py", cwd=model_inputs)
    text = run("inspect", "seen.mar", cwd=model_inputs)
    assert text.returncode == 0
    assert '"modelVersion": "4.2"' in text.stdout
    assert "handler.py" in text.stdout
    as_json = json.loads(run("inspect", "seen.mar", "--json", cwd=model_inputs).stdout)
    assert as_json["manifest"]["model"]["modelName"] == "seen"
    assert {f["name"] for f in as_json["files"]} == {"handler.py", "MAR-INF/MANIFEST.json"}


def test_inspect_of_a_missing_file_exits_1(tmp_path: Path) -> None:
    result = run("inspect", "nothing.mar", cwd=tmp_path)
    assert result.returncode == 1
    assert "ERROR - No such file or directory: nothing.mar" in result.stderr


def test_python_dash_m_is_the_same_command(model_inputs: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "jupyter_serve.archive", "--model-name", "viam", "-v", "1",
         "--handler", "base_handler", "--archive-format", "tgz"],
        cwd=model_inputs, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (model_inputs / "viam.tar.gz").is_file()
