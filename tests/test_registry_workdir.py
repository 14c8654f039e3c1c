"""`registry.workdir`: where an archive is extracted for its model, and removing it again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jupyter_serve.archive import ArchiveSpec, build_mar
from jupyter_serve.server.models import RegisterParams
from jupyter_serve.server.registry import RegistryConfig
from jupyter_serve.server.registry.sources import Source
from jupyter_serve.server.registry.workdir import prepare_model, remove_paths
from jupyter_serve.wire.errors import ArchiveError

HANDLER = "def handle(data, context):\n    return data\n"


@pytest.fixture
def config(tmp_path: Path) -> RegistryConfig:
    return RegistryConfig(tmp_path / "store", tmp_path / "work")


def build_archive(folder: Path, name: str, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    handler = folder / "handler.py"
    handler.write_text(HANDLER)
    spec = ArchiveSpec(name, str(handler), version=version, export_path=str(folder))
    return build_mar(spec)


def test_an_archive_is_extracted_under_its_name_and_version(
    config: RegistryConfig, tmp_path: Path
) -> None:
    archive = build_archive(tmp_path / "src", "echo", "2.0")
    renamed = RegisterParams(model_name="renamed")
    spec, extracted = asyncio.run(prepare_model(config, "echo.mar", Source(archive), renamed))
    assert extracted is not None
    assert extracted.parent == config.workdir / "renamed"
    assert extracted.name.startswith("2.0-")
    assert (spec.model_name, spec.version, spec.model_url) == ("renamed", "2.0", "echo.mar")
    assert (Path(spec.model_dir) / "handler.py").read_text() == HANDLER
    assert not any((config.workdir / ".incoming").iterdir())


def test_a_folder_is_used_where_it_is(config: RegistryConfig, tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "handler.py").write_text(HANDLER)
    params = RegisterParams(model_name="plain", handler="handler.py")
    spec, extracted = asyncio.run(prepare_model(config, str(folder), Source(folder), params))
    assert extracted is None
    assert Path(spec.model_dir) == folder
    assert not config.workdir.exists()


def test_a_file_that_is_no_archive_is_torchserves_400_and_leaves_nothing(
    config: RegistryConfig, tmp_path: Path
) -> None:
    junk = tmp_path / "junk.mar"
    junk.write_bytes(b"not a zip nor a tar")
    with pytest.raises(ArchiveError) as raised:
        asyncio.run(prepare_model(config, "junk.mar", Source(junk), RegisterParams()))
    assert (raised.value.status_code, raised.value.message) == (400, "Model name is not defined.")
    assert raised.value.to_json()["cause"]
    assert not any((config.workdir / ".incoming").iterdir())


def test_remove_paths_removes_trees_and_files_but_not_a_symlinks_target(tmp_path: Path) -> None:
    tree, file, target = tmp_path / "tree", tmp_path / "file", tmp_path / "target"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "x").write_text("x")
    file.write_text("y")
    target.mkdir()
    (target / "kept").write_text("z")
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    remove_paths(tree, None, file, link, tmp_path / "never-there")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["target"]
    assert (target / "kept").read_text() == "z"
