"""extract_mar and inspect_archive: round trips, every way out of the target refused, and
every size bounded before it is read."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import stat
import struct
import tarfile
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import pytest

from jupyter_serve.archive import (
    ArchiveSpec,
    ExtractLimits,
    build_mar,
    extract_mar,
    inspect_archive,
    read_manifest,
)
from jupyter_serve.archive.extract import MAX_HEADER_BYTES
from jupyter_serve.wire.errors import ArchiveError, UnsafeArchive


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


def test_zip_bomb_by_declared_size_is_stopped(tmp_path: Path) -> None:
    archive = tmp_path / "bomb.mar"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", b"\x00" * (4 << 20))
    limits = ExtractLimits(max_total_bytes=1 << 20)
    with pytest.raises(UnsafeArchive, match="expands past"):
        extract_mar(archive, tmp_path / "work" / "m", limits=limits)
    assert list((tmp_path / "work").iterdir()) == []


def test_zip_bomb_by_file_count_is_stopped(tmp_path: Path) -> None:
    archive = zip_with(tmp_path / "many.mar", [(f"f{i}", b"") for i in range(20)])
    with pytest.raises(UnsafeArchive, match="more than 10 members"):
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


# ---- sizes bounded before reading, links checked last, expansion capped ---------------


def declare_size(archive: Path, name: str, size: int) -> None:
    """Rewrite the uncompressed size the central directory declares for `name`."""
    data = bytearray(archive.read_bytes())
    at = data.index(b"PK\x01\x02")
    while data[at + 46 : at + 46 + len(name)] != name.encode():
        at = data.index(b"PK\x01\x02", at + 4)
    struct.pack_into("<I", data, at + 24, size)
    archive.write_bytes(bytes(data))


def refused(archive: Path, tmp_path: Path, message: str, **limits: Any) -> str:
    """Extract `archive`, expecting a refusal matching `message` and nothing left behind."""
    work = tmp_path / "work"
    with pytest.raises(ArchiveError, match=message) as caught:
        extract_mar(archive, work / "model", limits=ExtractLimits(**limits))
    assert caught.value.status_code == 400
    assert list(work.iterdir()) == []
    return caught.value.message


def test_a_768_mib_zip_link_target_is_refused_without_reading_it(tmp_path: Path) -> None:
    archive = zip_with(tmp_path / "link.mar", [(zip_symlink("weights", "w.bin"), b"w.bin")])
    declare_size(archive, "weights", 768 << 20)
    tracemalloc.start()
    try:
        refused(archive, tmp_path, r"^Archive link 'weights' has a target over 4096 bytes\.$")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


@pytest.mark.parametrize("kind", [tarfile.GNUTYPE_LONGLINK, tarfile.GNUTYPE_LONGNAME, b"x"])
def test_a_768_mib_tar_name_link_or_pax_record_is_refused_unread(
    kind: bytes, tmp_path: Path
) -> None:
    header = tarfile.TarInfo("././@LongLink")
    header.type, header.size = kind, 768 << 20
    archive = tmp_path / "long.tar.gz"
    with gzip.open(archive, "wb") as out:  # the header, then far less data than it claims
        out.write(header.tobuf(format=tarfile.GNU_FORMAT) + b"a" * (1 << 20))
    tracemalloc.start()
    try:
        message = refused(archive, tmp_path, r"^Archive has a 805306368-byte name, link or pax")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
    assert "aaaa" not in message
    with pytest.raises(UnsafeArchive):
        inspect_archive(archive)


def test_a_link_made_to_climb_by_a_later_member_is_caught(tmp_path: Path) -> None:
    # `l -> x/..` is the folder itself while `x` is missing; `x -> .` then lifts it out.
    archive = tar_with(
        tmp_path / "climb.tar.gz",
        [
            (tar_member("l", tarfile.SYMTYPE, "x/.."), b""),
            (tar_member("x", tarfile.SYMTYPE, "."), b""),
        ],
    )
    assert refused(archive, tmp_path, "points outside") == (
        "Archive link 'l' points outside the model folder."
    )


def test_messages_never_repeat_member_content_and_cut_long_names(tmp_path: Path) -> None:
    secret = "TOPSECRET-" * 10 + "/../../../../etc"
    archive = zip_with(tmp_path / "s.mar", [(zip_symlink("l", secret), secret.encode())])
    assert "TOPSECRET" not in refused(archive, tmp_path, "points outside")
    long_name = "n" * 5000 + "/../../x"
    archive = zip_with(tmp_path / "n.mar", [(long_name, b"TOPSECRET")])
    message = refused(archive, tmp_path, "leaves the target")
    assert len(message) < 200
    assert "TOPSECRET" not in message


def test_expansion_past_the_ratio_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "ratio.mar"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", b"\x00" * (4 << 20))  # about 4 KiB compressed
    message = refused(archive, tmp_path, "expands past", ratio_grace=1 << 20)
    assert message.endswith("(200 times the archive's size); refusing to extract.")
    model_dir = extract_mar(archive, tmp_path / "ok" / "m", limits=ExtractLimits(max_ratio=0))
    assert (model_dir / "zeros.bin").stat().st_size == 4 << 20


def test_expansion_past_the_free_disk_space_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = zip_with(tmp_path / "big.mar", [("w.bin", os.urandom(2 << 20))])
    monkeypatch.setattr(
        "jupyter_serve.archive.extract.shutil.disk_usage",
        lambda path: shutil._ntuple_diskusage(10 << 30, 10 << 30, 1 << 20),  # type: ignore[attr-defined]
    )
    assert refused(archive, tmp_path, "expands past").endswith(
        "(the free disk space); refusing to extract."
    )


def test_hard_links_count_their_bytes_again(tmp_path: Path) -> None:
    links = [(tar_member(f"copy{i}", tarfile.LNKTYPE, "a.bin"), b"") for i in range(3)]
    archive = tar_with(tmp_path / "h.tar.gz", [(tar_member("a.bin"), os.urandom(300_000)), *links])
    refused(archive, tmp_path, "expands past 1000000 bytes", max_total_bytes=1_000_000)


def test_an_oversized_manifest_is_refused(tmp_path: Path) -> None:
    big = b'{"model": {}, "pad": "' + b"x" * (1 << 20) + b'"}'
    archive = zip_with(tmp_path / "m.mar", [("MAR-INF/MANIFEST.json", big)])
    refused(archive, tmp_path, r"^Archive manifest is over 1048576 bytes")
    with pytest.raises(ArchiveError, match="over 1048576 bytes"):
        inspect_archive(archive)
    declare_size(archive, "MAR-INF/MANIFEST.json", 100)  # a lying header still gets nowhere
    with pytest.raises(ArchiveError, match=r"over 1048576 bytes|corrupt"):
        extract_mar(archive, tmp_path / "again" / "m")


def test_a_corrupt_archive_is_an_archive_error(tmp_path: Path) -> None:
    archive = zip_with(tmp_path / "c.mar", [("handler.py", b"def handle(d, c):\n    return d\n")])
    data = bytearray(archive.read_bytes())
    data[data.index(b"def handle")] ^= 0xFF  # the stored bytes no longer match their CRC
    archive.write_bytes(bytes(data))
    assert refused(archive, tmp_path, "corrupt") == (
        "Cannot read the archive: corrupt or unsupported."
    )


@pytest.mark.parametrize("name", ["m/" + "a" * 300, "m/" + "d/" * 2100 + "f"])
def test_a_member_name_the_file_system_refuses_is_an_archive_error(
    name: str, tmp_path: Path
) -> None:
    """A part over NAME_MAX (255) or a path over PATH_MAX (4096): OSError 36, once a 500."""
    archive = tar_with(
        tmp_path / "long.tar.gz", [(tar_member("m/h.py"), b"x"), (tar_member(name), b"y")]
    )
    assert refused(archive, tmp_path, "name is too long") == (
        "Cannot extract the archive: a member's name is too long for the file system."
    )


@pytest.mark.parametrize("entries", [[("a", b"file"), ("a/", b"")], [("a/", b""), ("a", b"f")]])
def test_members_clashing_with_earlier_ones_are_refused(
    entries: list[tuple[str | zipfile.ZipInfo, bytes]], tmp_path: Path
) -> None:
    archive = zip_with(tmp_path / "dup.mar", entries)
    refused(archive, tmp_path, "clashes with an earlier member")
    members = [(tar_member("a"), b"file"), (tar_member("a", tarfile.SYMTYPE, "b"), b"")]
    refused(tar_with(tmp_path / "dup.tar.gz", members), tmp_path, "clashes with an earlier")


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_tars_plain_or_compressed_are_read_and_their_long_names_kept(
    mode: str, tmp_path: Path
) -> None:
    """Compression is told by its magic number, as tarfile's "r:*" tells it, and member
    data is read without the header limit (a 200-character name is a long-name record)."""
    long_name = "d/" + "/".join(["n" * 60] * 3) + "/file.py"
    archive = tmp_path / "model.tar"
    with tarfile.open(archive, mode) as tar:
        for name, data in (("handler.py", b"x = 1\n"), (long_name, b"y" * (MAX_HEADER_BYTES + 1))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    target = extract_mar(archive, tmp_path / "out")
    assert (target / "handler.py").read_bytes() == b"x = 1\n"
    assert (target / long_name).stat().st_size == MAX_HEADER_BYTES + 1


def test_an_oversized_pax_record_of_any_size_is_refused_unread(tmp_path: Path) -> None:
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, MAX_HEADER_BYTES + 1
    archive = tmp_path / "pax.tar.gz"
    with gzip.open(archive, "wb") as out:
        out.write(header.tobuf(format=tarfile.USTAR_FORMAT) + b"a" * (MAX_HEADER_BYTES + 512))
    refused(archive, tmp_path, rf"^Archive has a {MAX_HEADER_BYTES + 512}-byte name, link or pax")
