"""handler_factory: first-call setup (extra files, packages, GPU memory) and batch flow."""

from __future__ import annotations

import importlib
import io
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from handler_fakes import FakeContext

from jupyter_serve.handlers import dependencies
from jupyter_serve.handlers.exceptions import PredictionException
from jupyter_serve.handlers.factory import handler_factory, limit_gpu_memory
from jupyter_serve.wire.errors import UnsafeArchive


class _Recorder:
    """An init_function that records its calls and returns a doubling model."""

    def __init__(self, model: Any = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.model = model if model is not None else (lambda batch: batch * 2)

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self.model


def _tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return path


def test_first_call_initializes_once_with_model_dir_device_and_kwargs(tmp_path: Path) -> None:
    init = _Recorder()
    handle = handler_factory(init, scale=3)
    context = FakeContext(tmp_path)
    assert handle(None, context) is None
    assert handle(None, context) is None
    assert init.calls == [{"model_dir": str(tmp_path), "device": torch.device("cpu"), "scale": 3}]


def test_batches_go_through_pre_model_post_per_row(tmp_path: Path) -> None:
    seen: list[Any] = []

    def model(batch: torch.Tensor) -> torch.Tensor:
        seen.append(batch)
        return batch * 2

    handle = handler_factory(
        _Recorder(model),
        preprocess_function=lambda value: torch.tensor(value, dtype=torch.float32),
        postprocess_function=lambda row: row.sum().item(),
    )
    rows = [{"data": [1, 2]}, {"body": [3, 4]}, {"data": [0, 0]}]
    assert handle(rows, FakeContext(tmp_path)) == [6.0, 14.0, 0.0]
    [batch] = seen
    assert batch.shape == (3, 2)
    assert not batch.requires_grad


def test_without_functions_values_and_outputs_pass_through(tmp_path: Path) -> None:
    handle = handler_factory(_Recorder(lambda batch: [f"<{value}>" for value in batch]))
    rows = [{"body": "a"}, {"data": "b"}]
    assert handle(rows, FakeContext(tmp_path)) == ["<a>", "<b>"]
    assert handle([], FakeContext(tmp_path)) == []


def test_dict_outputs_are_split_per_row(tmp_path: Path) -> None:
    def model(batch: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"double": batch * 2, "neg": -batch}

    handle = handler_factory(
        _Recorder(model),
        preprocess_function=torch.tensor,
        postprocess_function=lambda row: {key: value.item() for key, value in row.items()},
    )
    rows = [{"data": 1}, {"data": 5}]
    assert handle(rows, FakeContext(tmp_path)) == [
        {"double": 2, "neg": -1},
        {"double": 10, "neg": -5},
    ]


def test_samples_of_different_shapes_are_a_client_error(tmp_path: Path) -> None:
    handle = handler_factory(_Recorder(), preprocess_function=torch.tensor)
    with pytest.raises(PredictionException) as info:
        handle([{"data": [1, 2]}, {"data": [1]}], FakeContext(tmp_path))
    assert info.value.error_code == 400


def test_unsupported_model_output_is_explained(tmp_path: Path) -> None:
    handle = handler_factory(_Recorder(lambda batch: 42))
    with pytest.raises(TypeError, match="returned int"):
        handle([{"data": 1}], FakeContext(tmp_path))


def test_extra_files_are_unpacked_before_the_init_function_imports_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = "jupyter_serve_test_extra_dep"
    _tar(tmp_path / "deps.tar.gz", {f"{module}.py": b"VALUE = 41\n", "data/x.txt": b"x"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    importlib.invalidate_caches()

    def init(model_dir: str, device: Any) -> Any:
        value = __import__(module).VALUE
        return lambda batch: [value + item for item in batch]

    handle = handler_factory(init)
    context = FakeContext(tmp_path, model_yaml_config={"system": {"extraFiles": "deps.tar.gz"}})
    assert handle([{"data": 1}], context) == [42]
    assert (tmp_path / "data" / "x.txt").read_text() == "x"
    sys.modules.pop(module, None)


def test_unpacking_is_done_once_per_archive(tmp_path: Path) -> None:
    _tar(tmp_path / "deps.tar.gz", {"dep.txt": b"original"})
    assert dependencies.unpack_into(tmp_path, "deps.tar.gz") is True
    (tmp_path / "dep.txt").write_text("edited")
    assert dependencies.unpack_into(tmp_path, "deps.tar.gz") is False
    assert (tmp_path / "dep.txt").read_text() == "edited"
    assert not list(tmp_path.glob(".unpack-*"))


def test_a_new_archive_replaces_files_and_merges_folders(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "kept.py").write_text("kept")
    _tar(tmp_path / "deps.tar.gz", {"pkg/new.py": b"new", "top.txt": b"v2"})
    (tmp_path / "top.txt").write_text("v1")
    dependencies.unpack_into(tmp_path, "deps.tar.gz")
    assert (tmp_path / "pkg" / "kept.py").read_text() == "kept"
    assert (tmp_path / "pkg" / "new.py").read_text() == "new"
    assert (tmp_path / "top.txt").read_text() == "v2"


def test_archive_members_may_not_leave_the_model_dir(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    _tar(model_dir / "evil.tar.gz", {"ok.txt": b"ok", "../escaped.txt": b"gotcha"})
    with pytest.raises(UnsafeArchive):
        dependencies.unpack_into(model_dir, "evil.tar.gz")
    assert not (tmp_path / "escaped.txt").exists()
    assert not (model_dir / "ok.txt").exists()
    assert not list(model_dir.glob(".unpack-*"))


def test_the_archive_itself_must_be_inside_the_model_dir(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    _tar(tmp_path / "outside.tar.gz", {"a.txt": b"a"})
    with pytest.raises(UnsafeArchive):
        dependencies.unpack_into(model_dir, "../outside.tar.gz")


def test_unpack_dependencies_argument(tmp_path: Path) -> None:
    _tar(tmp_path / "other.tar.gz", {"from_other.txt": b"1"})
    _tar(tmp_path / "deps.tar.gz", {"from_deps.txt": b"1"})
    config = {"system": {"extraFiles": "deps.tar.gz"}}
    handler_factory(_Recorder(), unpack_dependencies=False)(
        None, FakeContext(tmp_path, model_yaml_config=config)
    )
    assert not (tmp_path / "from_deps.txt").exists()
    handler_factory(_Recorder(), unpack_dependencies="other.tar.gz")(None, FakeContext(tmp_path))
    assert (tmp_path / "from_other.txt").exists()
    with pytest.raises(ValueError, match=r"system\.extraFiles"):
        handler_factory(_Recorder(), unpack_dependencies=True)(None, FakeContext(tmp_path))


def test_only_missing_packages_are_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed: list[list[str]] = []

    def fake_pip(requirements: Sequence[str]) -> None:
        installed.append(list(requirements))

    monkeypatch.setattr(dependencies, "pip_install", fake_pip)
    packages = ["PyYAML>=6", "pillow", "jupyter-serve-no-such-package==1.0"]
    handle = handler_factory(_Recorder(), install_packages=packages)
    handle(None, FakeContext(tmp_path))
    assert installed == [["jupyter-serve-no-such-package==1.0"]]


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [("pyyaml", True), ("PyYAML >= 6", True), ("torch", True), ("no-such-pkg-xyz", False)],
)
def test_is_installed(requirement: str, expected: bool) -> None:
    assert dependencies.is_installed(requirement) is expected


class _FakeCuda:
    """Enough of torch.cuda for the memory cap: an 8 GiB device that records the fraction."""

    def __init__(self) -> None:
        self.fractions: list[tuple[float, torch.device]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(
            torch.cuda,
            "get_device_properties",
            lambda device: SimpleNamespace(total_memory=8 * 2**30),
        )
        monkeypatch.setattr(
            torch.cuda,
            "set_per_process_memory_fraction",
            lambda fraction, device: self.fractions.append((fraction, device)),
        )


def test_max_gpu_memory_caps_the_cuda_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cuda = _FakeCuda()
    cuda.install(monkeypatch)
    init = _Recorder()
    config = {"system": {"maxGPUMemory": 2048}}
    handler_factory(init)(None, FakeContext(tmp_path, gpu_id=1, model_yaml_config=config))
    assert cuda.fractions == [(0.25, torch.device("cuda:1"))]
    assert init.calls[0]["device"] == torch.device("cuda:1")


def test_max_gpu_memory_is_ignored_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = _FakeCuda()
    cuda.install(monkeypatch)
    config = {"system": {"maxGPUMemory": 2048}}
    handler_factory(_Recorder())(None, FakeContext(tmp_path, model_yaml_config=config))
    assert cuda.fractions == []
    assert limit_gpu_memory(None, torch.device("cuda:0")) is None
    assert limit_gpu_memory(64 * 1024, torch.device("cuda:0")) == 1.0
