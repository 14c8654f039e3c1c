"""build_mar: formats, filters, --force, and every failure torch-model-archiver has."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from jupyter_serve.archive import (
    ArchiveSpec,
    Manifest,
    ModelInfo,
    build_mar,
    inspect_archive,
    output_path,
    pack_folder,
)
from jupyter_serve.wire.errors import ArchiveError


def spec_for(src: Path, out: Path, **changes: object) -> ArchiveSpec:
    values: dict[str, object] = {
        "model_name": "m",
        "version": "1.0",
        "handler": str(src / "handler.py"),
        "export_path": str(out),
    }
    values.update(changes)
    return ArchiveSpec(**values)  # type: ignore[arg-type]


def names_in(path: Path) -> set[str]:
    return {name for name, _size in inspect_archive(path).files}


@pytest.mark.parametrize(
    ("archive_format", "suffix"),
    [("default", ".mar"), ("zip-store", ".mar"), ("tgz", ".tar.gz"), ("no-archive", "")],
)
def test_output_path_per_format(
    archive_format: str, suffix: str, model_inputs: Path, tmp_path: Path
) -> None:
    spec = spec_for(model_inputs, tmp_path, archive_format=archive_format)
    built = build_mar(spec)
    assert built == tmp_path / f"m{suffix}" == output_path(spec)
    assert built.exists()


def test_handler_with_function_suffix_is_copied_as_module(
    model_inputs: Path, tmp_path: Path
) -> None:
    # torch-model-archiver 0.12 fails on "file.py:fn"; we copy file.py and keep the spec.
    built = build_mar(spec_for(model_inputs, tmp_path, handler=f"{model_inputs}/handler.py:handle"))
    listing = inspect_archive(built)
    assert {n for n, _ in listing.files} == {"handler.py", "MAR-INF/MANIFEST.json"}
    assert listing.manifest is not None
    assert listing.manifest.model.handler == "handler.py:handle"


def test_builtin_handler_is_not_copied(model_inputs: Path, tmp_path: Path) -> None:
    built = build_mar(spec_for(model_inputs, tmp_path, handler="object_detector"))
    assert names_in(built) == {"MAR-INF/MANIFEST.json"}


def test_pyc_files_are_left_out(model_inputs: Path, tmp_path: Path) -> None:
    (model_inputs / "extra" / "stale.pyc").write_bytes(b"bytecode")
    built = build_mar(spec_for(model_inputs, tmp_path, extra_files=str(model_inputs / "extra")))
    assert "stale.pyc" not in names_in(built)
    assert "tokenizer.json" in names_in(built)


def test_extra_files_accept_a_list_and_globs(model_inputs: Path, tmp_path: Path) -> None:
    spec = spec_for(
        model_inputs,
        tmp_path,
        extra_files=[str(model_inputs / "*.txt"), str(model_inputs / "labels.csv")],
    )
    assert {"vocab.txt", "requirements.txt", "labels.csv"} <= names_in(build_mar(spec))


def test_unmatched_glob_only_warns(
    model_inputs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    build_mar(spec_for(model_inputs, tmp_path, extra_files=str(model_inputs / "*.nothing")))
    assert "did not match any file" in caplog.text


def test_later_inputs_replace_earlier_ones_with_the_same_name(
    model_inputs: Path, tmp_path: Path
) -> None:
    other = model_inputs / "other"
    other.mkdir()
    (other / "handler.py").write_text("# from extra files\n")
    built = build_mar(spec_for(model_inputs, tmp_path, extra_files=str(other)))
    with zipfile.ZipFile(built) as zf:
        assert zf.read("handler.py") == b"# from extra files\n"


def test_two_folders_with_the_same_subfolder_are_merged(model_inputs: Path, tmp_path: Path) -> None:
    for folder, name in (("a", "one.txt"), ("b", "two.txt")):
        (model_inputs / folder / "shared").mkdir(parents=True)
        (model_inputs / folder / "shared" / name).write_text(name)
    extra = f"{model_inputs / 'a'},{model_inputs / 'b'}"
    names = names_in(build_mar(spec_for(model_inputs, tmp_path, extra_files=extra)))
    assert {"shared/one.txt", "shared/two.txt"} <= names


def test_existing_output_needs_force(model_inputs: Path, tmp_path: Path) -> None:
    build_mar(spec_for(model_inputs, tmp_path))
    before = (tmp_path / "m.mar").read_bytes()
    with pytest.raises(ArchiveError, match="already exists") as caught:
        build_mar(spec_for(model_inputs, tmp_path, version="2.0"))
    assert "--force/-f" in caught.value.message
    assert (tmp_path / "m.mar").read_bytes() == before  # nothing lost

    rebuilt = build_mar(spec_for(model_inputs, tmp_path, version="2.0", force=True))
    manifest = inspect_archive(rebuilt).manifest
    assert manifest is not None
    assert manifest.model.model_version == "2.0"


def test_no_archive_force_overwrites_in_place(model_inputs: Path, tmp_path: Path) -> None:
    build_mar(spec_for(model_inputs, tmp_path, archive_format="no-archive"))
    with pytest.raises(ArchiveError, match="already exists"):
        build_mar(spec_for(model_inputs, tmp_path, archive_format="no-archive"))
    (model_inputs / "handler.py").write_text("# v2\n")
    folder = build_mar(spec_for(model_inputs, tmp_path, archive_format="no-archive", force=True))
    assert (folder / "handler.py").read_text() == "# v2\n"
    assert (folder / "MAR-INF" / "MANIFEST.json").is_file()


@pytest.mark.parametrize("name", ["-lead", "has space", "semi;colon", "", "ünï", "a/b"])
def test_invalid_model_names_are_refused(name: str, model_inputs: Path, tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="special characters"):
        build_mar(spec_for(model_inputs, tmp_path, model_name=name))
    assert not list(tmp_path.glob("*.mar"))


@pytest.mark.parametrize("name", ["resnet-18", "a.b_c", "0abc", "Model.V2"])
def test_valid_model_names_pass(name: str, model_inputs: Path, tmp_path: Path) -> None:
    assert build_mar(spec_for(model_inputs, tmp_path, model_name=name)).name == f"{name}.mar"


def test_export_path_must_be_a_folder(model_inputs: Path, tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="is not a directory"):
        build_mar(spec_for(model_inputs, tmp_path / "missing"))


@pytest.mark.parametrize(
    "field", ["model_file", "serialized_file", "requirements_file", "config_file", "handler"]
)
def test_missing_input_file_fails_and_writes_nothing(
    field: str, model_inputs: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(FileNotFoundError, match="nope"):
        build_mar(spec_for(model_inputs, out, **{field: str(model_inputs / "nope.py")}))
    assert list(out.iterdir()) == []


def test_missing_extra_file_fails(model_inputs: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="File does not exist"):
        build_mar(spec_for(model_inputs, tmp_path, extra_files=str(model_inputs / "gone.json")))


def test_failed_write_leaves_no_partial_archive(
    model_inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()

    def explode(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(zipfile.ZipFile, "writestr", explode)
    with pytest.raises(OSError, match="disk full"):
        build_mar(spec_for(model_inputs, out))
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"runtime": "python4"}, "Invalid runtime"), ({"archive_format": "rar"}, "archive format")],
)
def test_spec_validation(changes: dict[str, str], message: str) -> None:
    with pytest.raises(ArchiveError, match=message):
        ArchiveSpec(model_name="m", version="1", handler="h.py", **changes)  # type: ignore[arg-type]


def test_lsp_runtime_copies_the_shared_library(tmp_path: Path) -> None:
    (tmp_path / "libhandler.so").write_bytes(b"\x7fELF")
    spec = ArchiveSpec(
        model_name="cpp", version="1", handler=str(tmp_path / "libhandler:Handler"),
        runtime="LSP", export_path=str(tmp_path),
    )  # fmt: skip
    assert names_in(build_mar(spec)) == {"libhandler.so", "MAR-INF/MANIFEST.json"}


def test_pack_folder_zips_a_model_folder_with_the_given_manifest(
    model_inputs: Path, tmp_path: Path
) -> None:
    folder = build_mar(spec_for(model_inputs, tmp_path, archive_format="no-archive",
                                extra_files=str(model_inputs / "extra")))  # fmt: skip
    (folder / "stale.pyc").write_bytes(b"pyc")
    manifest = Manifest(model=ModelInfo(model_name="m", model_version="2.0", handler="h:fn"))
    mar = pack_folder(folder, tmp_path / "out.mar", manifest)
    assert names_in(mar) == {
        "handler.py",
        "tokenizer.json",
        ".keep",
        "nested/merges.txt",
        "nested/deeper/x.bin",
        "MAR-INF/MANIFEST.json",
    }  # fmt: skip  (the folder's old manifest, bytecode and hidden folders are left out)
    assert inspect_archive(mar).manifest == manifest
    with zipfile.ZipFile(mar) as zf:
        assert zf.read("handler.py") == (model_inputs / "handler.py").read_bytes()
