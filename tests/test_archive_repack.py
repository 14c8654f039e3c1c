"""holds_version, running_manifest, repack: a version's archive, copied or packed anew."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from jupyter_serve.archive import (
    ArchiveSpec,
    Manifest,
    ModelInfo,
    build_mar,
    holds_version,
    inspect_archive,
    repack,
    running_manifest,
)


def built(src: Path, out: Path, archive_format: str = "default") -> Path:
    out.mkdir(exist_ok=True)
    spec = ArchiveSpec(model_name="m", version="2.0", handler=str(src / "handler.py"),
                       extra_files=str(src / "vocab.txt"), export_path=str(out),
                       archive_format=archive_format)  # fmt: skip
    return build_mar(spec)


def test_holds_version_checks_the_version_the_handler_and_the_format(
    model_inputs: Path, tmp_path: Path
) -> None:
    mar = built(model_inputs, tmp_path / "out")
    assert holds_version(mar, "2.0", "handler.py")
    assert not holds_version(mar, "1.0", "handler.py")
    assert not holds_version(mar, "2.0", "handler:other")
    tgz = built(model_inputs, tmp_path / "tgz", "tgz")
    assert not holds_version(tgz, "2.0", "handler.py")  # a .tar.gz is packed anew
    (tmp_path / "broken.mar").write_bytes(b"PK\x03\x04 not a zip")
    assert not holds_version(tmp_path / "broken.mar", "2.0", "handler.py")
    assert not holds_version(tmp_path / "missing.mar", "2.0", "handler.py")


def test_running_manifest_names_the_handler_version_and_a_missing_name() -> None:
    bare = Manifest(model=ModelInfo(handler="h.py"), runtime="python3")
    running = running_manifest(bare, "served", "3.0", "h:fn")
    assert running.model == ModelInfo(model_name="served", model_version="3.0", handler="h:fn")
    assert running.runtime == "python3"
    named = Manifest(model=ModelInfo(model_name="own", model_version="1"))
    assert running_manifest(named, "served", "3.0", "h").model.model_name == "own"


@pytest.mark.parametrize("archive_format", ["tgz", "no-archive", "default"])
def test_repack_makes_a_mar_of_an_archive_or_a_folder(
    model_inputs: Path, tmp_path: Path, archive_format: str
) -> None:
    source = built(model_inputs, tmp_path / "out", archive_format)
    manifest = Manifest(model=ModelInfo(model_name="m", model_version="2.0", handler="h:fn"))
    mar = repack(source, tmp_path / "m.mar", manifest)
    assert inspect_archive(mar).manifest == manifest
    with zipfile.ZipFile(mar) as zf:
        assert sorted(zf.namelist()) == ["MAR-INF/MANIFEST.json", "handler.py", "vocab.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_repack_of_a_missing_source_fails(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        repack(tmp_path / "gone.mar", tmp_path / "m.mar", Manifest(model=ModelInfo()))
