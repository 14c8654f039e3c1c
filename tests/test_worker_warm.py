"""jupyter_serve.worker.warm: the settings a forked worker takes from its load request.

`sys.path`, `os.environ` and `sys.modules["torch"]` are swapped by monkeypatch
(a fake torch that records calls), so nothing leaks out of a test. The factory's
warm-up itself runs in a real factory process (test_worker_factory.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from jupyter_serve.worker import warm

ROOT = str(Path(warm.__file__).resolve().parents[2])


def test_sys_path_entries_go_right_after_the_package_folder_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "path", ["/cwd", ROOT, "/user", "/site"])
    warm.apply_settings(["/deps", "/user", "/deps", "/more"], {}, None)
    assert sys.path == ["/cwd", ROOT, "/deps", "/more", "/user", "/site"]


def test_without_the_package_folder_entries_go_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", ["/cwd", "/site"])
    warm.apply_settings(["/deps"], {}, None)
    assert sys.path == ["/deps", "/cwd", "/site"]


def test_env_changes_set_and_remove(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JS_WARM_GONE", "1")
    monkeypatch.setenv("JS_WARM_CHANGED", "before")  # monkeypatch restores both afterwards
    warm.apply_settings([], {"JS_WARM_CHANGED": "2", "JS_WARM_GONE": None, "JS_NEVER": None}, None)
    assert (os.environ.get("JS_WARM_CHANGED"), os.environ.get("JS_WARM_GONE")) == ("2", None)


def test_torch_threads_reach_an_imported_torch_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(set_num_threads=calls.append))
    warm.set_torch_threads(3)
    warm.set_torch_threads(None)
    assert calls == [3]
    monkeypatch.delitem(sys.modules, "torch")
    warm.set_torch_threads(2)  # no torch imported: nothing to do, nothing imported
    assert "torch" not in sys.modules


def test_imported_packages_are_top_level_and_not_stdlib() -> None:
    names = warm.imported_packages()
    assert "jupyter_serve" in names
    assert not {"json", "os"} & set(names)
    assert all("." not in name and not name.startswith("__") for name in names)
    assert names == sorted(names)
