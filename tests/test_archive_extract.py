"""extract_mar and inspect_archive: round trips, and every way out of the target refused."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from jupyter_serve.archive import (
    ArchiveSpec,
    ExtractLimits,
    build_mar,
    extract_mar,
    inspect_archive,
    read_manifest,
)
from jupyter_serve.errors import ArchiveError, UnsafeArchive


def build(src: Path, out: Path, archive_format: str) -> Path:
    spec = ArchiveSpec(
        model_name="rt", version="3.0", handler=str(src / "handler.py"),
        serialized_file=str(src / "weights.pt"), extra_files=str(src / "extra"),
        export_path=str(out), archive_format=archive_format,
    )  # fmt: skip
    return build_mar(spec)


@pytest.mark.parametrize("archive_format", ["default", "zip-store", "tgz"])
def test_build_extract_round_trip(archive_format: str, model_inputs: Path, tmp_path: Path) -> None:
    archive = build(model_inputs, tmp_path, archive_format)
    model_dir = extract_mar(archive, tmp_path / "work" / "rt")
    assert (model_dir / "handler.py").read_bytes() == (model_inputs / "handler.py").read_bytes()
    assert (model_dir / "weights.pt").read_bytes() == (model_inputs / "weights.pt").read_bytes()
    assert (model_dir / "nested" / "deeper" / "x.bin").read_bytes() == b"\x00" * 10
    manifest = read_manifest(model_dir)
    assert manifest.model.model_name == "rt"
    assert manifest.model.serialized_file == "weights.pt"
    assert [p.name for p in (tmp_path / "work").iterdir()] == ["rt"]  # no staging left


def test_inspect_lists_manifest_and_files_for_every_format(
    model_inputs: Path, tmp_path: Path
) -> None:
    for archive_format in ("default", "tgz", "no-archive"):
        out = tmp_path / archive_format
        out.mkdir()
        listing = inspect_archive(build(model_inputs, out, archive_format))
        assert listing.manifest is not None
        assert listing.manifest.model.model_version == "3.0"
        names = {name.removeprefix("rt/") for name, _ in listing.files}
        assert {"handler.py", "weights.pt", "tokenizer.json", "MAR-INF/MANIFEST.json"} <= names
        sizes = {n.removeprefix("rt/"): s for n, s in listing.files}
        assert sizes["weights.pt"] == (model_inputs / "weights.pt").stat().st_size


def zip_with(path: Path, entries: list[tuple[str | zipfile.ZipInfo, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return path


def zip_symlink(name: str, target: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def tar_with(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def tar_member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def assert_refused_and_clean(archive: Path, tmp_path: Path, message: str) -> None:
    work = tmp_path / "work"
    with pytest.raises(UnsafeArchive, match=message) as caught:
        extract_mar(archive, work / "model")
    assert caught.value.status_code == 400
    assert list(work.iterdir()) == []  # staging removed, target never created
    assert not (tmp_path / "evil.txt").exists()
    assert not Path("/tmp/jupyter_serve_evil.txt").exists()


@pytest.mark.parametrize(
    "name", ["../evil.txt", "a/../../evil.txt", "/tmp/jupyter_serve_evil.txt", "..\\evil.txt"]
)
def test_zip_slip_is_refused(name: str, tmp_path: Path) -> None:
    archive = zip_with(tmp_path / "slip.mar", [("ok.txt", b"ok"), (name, b"pwned")])
    assert_refused_and_clean(archive, tmp_path, "absolute path|leaves the target")


def test_zip_symlink_leaving_the_target_is_refused(tmp_path: Path) -> None:
    archive = zip_with(tmp_path / "link.mar", [(zip_symlink("link", "../../etc"), b"../../etc")])
    assert_refused_and_clean(archive, tmp_path, "points outside")


def test_zip_symlink_inside_the_target_is_kept(tmp_path: Path) -> None:
    archive = zip_with(
        tmp_path / "ok.mar", [("real/data.txt", b"d"), (zip_symlink("alias", "real"), b"real")]
    )
    model_dir = extract_mar(archive, tmp_path / "work" / "m")
    assert (model_dir / "alias").is_symlink()
    assert (model_dir / "alias" / "data.txt").read_bytes() == b"d"


def test_write_through_an_escaping_link_is_refused(tmp_path: Path) -> None:
    archive = tar_with(
        tmp_path / "t.tar.gz",
        [(tar_member("sub", tarfile.SYMTYPE, "/tmp"), b""), (tar_member("sub/evil.txt"), b"x")],
    )
    assert_refused_and_clean(archive, tmp_path, "points outside|leaves the target")


@pytest.mark.parametrize(
    ("member", "message"),
    [
        (tar_member("../evil.txt"), "leaves the target"),
        (tar_member("/tmp/jupyter_serve_evil.txt"), "absolute path"),
        (tar_member("l", tarfile.SYMTYPE, "../../.."), "points outside"),
        (tar_member("h", tarfile.LNKTYPE, "../outside"), "leaves the target"),
        (tar_member("dev", tarfile.CHRTYPE), "not a file or folder"),
        (tar_member("fifo", tarfile.FIFOTYPE), "not a file or folder"),
    ],
)
def test_tar_escapes_and_special_files_are_refused(
    member: tarfile.TarInfo, message: str, tmp_path: Path
) -> None:
    archive = tar_with(tmp_path / "bad.tar.gz", [(tar_member("ok.txt"), b"ok"), (member, b"")])
    assert_refused_and_clean(archive, tmp_path, message)


def test_tar_hard_link_to_an_extracted_member_is_copied(tmp_path: Path) -> None:
    archive = tar_with(
        tmp_path / "h.tar.gz",
        [(tar_member("a.txt"), b"same"), (tar_member("b.txt", tarfile.LNKTYPE, "a.txt"), b"")],
    )
    model_dir = extract_mar(archive, tmp_path / "work" / "m")
    assert (model_dir / "b.txt").read_bytes() == b"same"


def test_zip_bomb_by_size_is_stopped_while_streaming(tmp_path: Path) -> None:
    archive = tmp_path / "bomb.mar"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", b"\x00" * (4 << 20))
    limits = ExtractLimits(max_total_bytes=1 << 20)
    with pytest.raises(UnsafeArchive, match="expands past"):
        extract_mar(archive, tmp_path / "work" / "m", limits=limits)
    assert list((tmp_path / "work").iterdir()) == []


def test_zip_bomb_by_file_count_is_stopped(tmp_path: Path) -> None:
    archive = zip_with(tmp_path / "many.mar", [(f"f{i}", b"") for i in range(20)])
    with pytest.raises(UnsafeArchive, match="more than 10 files"):
        extract_mar(archive, tmp_path / "work" / "m", limits=ExtractLimits(max_files=10))


def test_not_an_archive_is_a_clear_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mar"
    junk.write_bytes(b"this is not a zip")
    with pytest.raises(ArchiveError, match="Not a model archive"):
        extract_mar(junk, tmp_path / "work" / "m")
    with pytest.raises(ArchiveError, match="Not a model archive"):
        inspect_archive(junk)


def test_existing_target_is_not_overwritten(model_inputs: Path, tmp_path: Path) -> None:
    archive = build(model_inputs, tmp_path, "default")
    target = tmp_path / "work" / "m"
    target.mkdir(parents=True)
    (target / "keep.txt").write_text("mine")
    with pytest.raises(ArchiveError, match="already exists"):
        extract_mar(archive, target)
    assert (target / "keep.txt").read_text() == "mine"
