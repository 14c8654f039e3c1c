"""Archives built by jupyter_serve against archives built by the real torch-model-archiver 0.12.

Same inputs, every archive format: the manifests must be equal but for createdOn and
archiverVersion, and the archives must hold the same files with the same bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from jupyter_serve.archive import ArchiveSpec, build_mar

TORCH_MODEL_ARCHIVER = Path(sys.executable).with_name("torch-model-archiver")
pytestmark = pytest.mark.skipif(
    not TORCH_MODEL_ARCHIVER.exists(), reason="torch-model-archiver is a test dependency"
)

FORMATS = ["default", "zip-store", "tgz", "no-archive"]


def archive_contents(path: Path) -> dict[str, bytes]:
    """name -> bytes of every file in a .mar, .tar.gz or no-archive folder."""
    if path.is_dir():
        return {
            p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()
        }
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            return {i.filename: zf.read(i) for i in zf.infolist() if not i.is_dir()}
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def split_manifest(contents: dict[str, bytes]) -> tuple[dict[str, object], dict[str, bytes]]:
    name = next(n for n in contents if n.endswith("MAR-INF/MANIFEST.json"))
    manifest = json.loads(contents.pop(name))
    manifest.pop("createdOn")
    manifest.pop("archiverVersion")
    return manifest, contents


def run_reference(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TORCH_MODEL_ARCHIVER), *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def build_both(args: list[str], tmp_path: Path, cwd: Path) -> tuple[Path, Path]:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    reference = run_reference([*args, "--export-path", str(theirs)], cwd)
    assert reference.returncode == 0, reference.stderr
    spec = ArchiveSpec.parse([*args, "--export-path", str(ours)])
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)  # relative handler names resolve against cwd, as for the reference
        built = build_mar(spec)
    return built, theirs / built.name


def full_args(src: Path, name: str, archive_format: str) -> list[str]:
    return [
        "--model-name", name,
        "--version", "2.1",
        "--model-file", str(src / "model.py"),
        "--serialized-file", str(src / "weights.pt"),
        "--handler", str(src / "handler.py"),
        "--extra-files", f"{src / 'index_to_name.json'},{src / 'extra'},{src / '*.txt'}",
        "--requirements-file", str(src / "requirements.txt"),
        "--config-file", str(src / "model-config.yaml"),
        "--archive-format", archive_format,
    ]  # fmt: skip


@pytest.mark.parametrize("archive_format", FORMATS)
def test_full_archive_matches_torch_model_archiver(
    archive_format: str, model_inputs: Path, tmp_path: Path
) -> None:
    name = f"full_{archive_format.replace('-', '_')}"
    ours, theirs = build_both(full_args(model_inputs, name, archive_format), tmp_path, model_inputs)

    our_manifest, our_files = split_manifest(archive_contents(ours))
    their_manifest, their_files = split_manifest(archive_contents(theirs))
    assert our_manifest == their_manifest
    assert our_files == their_files
    assert f"{name}/nested/deeper/x.bin" in our_files or "nested/deeper/x.bin" in our_files


@pytest.mark.parametrize("archive_format", ["default", "tgz"])
@pytest.mark.parametrize(
    "handler_args",
    [
        ["--handler", "image_classifier"],
        ["--handler", "handler:handle"],
        ["--handler", "handler"],
        ["--handler", "handler.py"],
    ],
    ids=["builtin", "module-function", "module", "file"],
)
def test_handler_forms_match(
    handler_args: list[str], archive_format: str, model_inputs: Path, tmp_path: Path
) -> None:
    name = f"h_{archive_format}_{abs(hash(tuple(handler_args))) % 10**6}"
    args = ["--model-name", name, "-v", "1.0", *handler_args, "--archive-format", archive_format]
    ours, theirs = build_both(args, tmp_path, model_inputs)
    assert split_manifest(archive_contents(ours)) == split_manifest(archive_contents(theirs))


def test_minimal_manifest_omits_absent_values(model_inputs: Path, tmp_path: Path) -> None:
    args = ["--model-name", "minimal_x", "-v", "1.0", "--handler", "text_classifier",
            "--runtime", "python3"]  # fmt: skip
    ours, theirs = build_both(args, tmp_path, model_inputs)
    ours_raw = archive_contents(ours)["MAR-INF/MANIFEST.json"]
    theirs_raw = archive_contents(theirs)["MAR-INF/MANIFEST.json"]
    assert set(archive_contents(ours)) == {"MAR-INF/MANIFEST.json"}
    # Same text layout (indent 2, key order) once the two volatile values are aligned.
    theirs_manifest = json.loads(theirs_raw)
    ours_manifest = json.loads(ours_raw)
    ours_manifest["createdOn"] = theirs_manifest["createdOn"]
    ours_manifest["archiverVersion"] = theirs_manifest["archiverVersion"]
    assert json.dumps(ours_manifest, indent=2) == theirs_raw.decode()
    assert list(ours_manifest["model"]) == ["modelName", "handler", "modelVersion"]


@pytest.mark.parametrize(
    ("archive_format", "compression"),
    [("default", zipfile.ZIP_DEFLATED), ("zip-store", zipfile.ZIP_STORED)],
)
def test_zip_compression_matches_format(
    archive_format: str, compression: int, model_inputs: Path, tmp_path: Path
) -> None:
    args = full_args(model_inputs, f"c_{archive_format.replace('-', '_')}", archive_format)
    for path in build_both(args, tmp_path, model_inputs):
        with zipfile.ZipFile(path) as zf:
            assert {info.compress_type for info in zf.infolist()} == {compression}


def test_skipped_folders_are_absent_from_both(model_inputs: Path, tmp_path: Path) -> None:
    ours, theirs = build_both(full_args(model_inputs, "skips", "default"), tmp_path, model_inputs)
    for path in (ours, theirs):
        names = set(archive_contents(path))
        assert "tokenizer.json" in names
        assert ".keep" in names
        assert not any("__pycache__" in n or ".git/" in n for n in names)
