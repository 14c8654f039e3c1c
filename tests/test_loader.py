"""Handler resolution in-process: entry points, built-ins, import errors, initialization."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_serve.worker.context import Context
from jupyter_serve.worker.loader import (
    HandlerLoadError,
    find_entry_point,
    load_handler,
    parse_handler,
    resolve_handler,
)


@pytest.fixture
def model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A model folder; whatever the test imports from tmp_path is forgotten afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    folder = tmp_path / "model"
    folder.mkdir()
    yield folder
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def context() -> Context:
    return Context("m", "/models/m", {"model": {}}, 1, None, "1.0")


FUNCTION = """
CALLS = []

def handle(data, context):
    CALLS.append((data, dict(context.request_ids)))
    return data


class Helper:
    def handle(self, data, context):
        return "class"
"""

ONE_CLASS = """
import json
from collections import OrderedDict  # imported classes never count


class NotAHandler:
    pass


class Doubler:
    def initialize(self, context):
        self.context = context

    def handle(self, data, context):
        return [x * 2 for x in data]
"""

TWO_CLASSES = """
class First:
    def handle(self, data, context):
        return ["first"]


class Second:
    def handle(self, data, context):
        return ["second"]
"""


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        ("handler", ("handler", None)),
        ("handler.py", ("handler", None)),
        ("/some/dir/handler.py:infer", ("handler", "infer")),
        ("pkg.mod:Cls", ("pkg.mod", "Cls")),
        (" h.py : fn ", ("h", "fn")),
    ],
)
def test_parse_handler_strips_folder_and_suffix(handler: str, expected: Any) -> None:
    assert parse_handler(handler) == expected


def test_parse_handler_refuses_an_empty_module() -> None:
    with pytest.raises(HandlerLoadError, match="no module name"):
        parse_handler(":handle")


def test_module_function_wins_and_is_called_with_none_at_load(model_dir: Path) -> None:
    write(model_dir, "fn_handler.py", FUNCTION)
    entry, handle = load_handler("fn_handler.py", model_dir, context())
    assert (entry.name, entry.is_class) == ("handle", False)
    assert entry.module.CALLS == [(None, {})]
    assert handle([1], context()) == [1]
    assert str(entry) == f"{model_dir / 'fn_handler.py'}:handle"


def test_named_function_entry_point(model_dir: Path) -> None:
    write(model_dir, "named.py", "def infer(data, context):\n    return ['named']\n")
    entry, handle = load_handler("named:infer", model_dir, context())
    assert entry.name == "infer"
    assert handle([], context()) == ["named"]


def test_the_only_class_with_handle_is_instantiated_and_initialized(model_dir: Path) -> None:
    write(model_dir, "cls_handler.py", ONE_CLASS)
    ctx = context()
    entry, handle = load_handler("cls_handler", model_dir, ctx)
    assert (entry.name, entry.is_class) == ("Doubler", True)
    assert handle.__self__.context is ctx  # type: ignore[attr-defined]
    assert handle([1, 2], ctx) == [2, 4]


def test_explicit_class_is_picked_among_several(model_dir: Path) -> None:
    write(model_dir, "two.py", TWO_CLASSES)
    _, handle = load_handler("two.py:Second", model_dir, context())
    assert handle([], context()) == ["second"]


def test_several_candidate_classes_are_listed(model_dir: Path) -> None:
    write(model_dir, "two.py", TWO_CLASSES)
    with pytest.raises(HandlerLoadError, match=r"several handler classes \(First, Second\)"):
        resolve_handler("two.py", model_dir)


def test_module_without_entry_point_is_an_error(model_dir: Path) -> None:
    write(model_dir, "nothing.py", "class Plain:\n    pass\n\nVALUE = 1\n")
    with pytest.raises(HandlerLoadError, match="no handle\\(data, context\\) function"):
        resolve_handler("nothing", model_dir)
    with pytest.raises(HandlerLoadError, match="has no entry point 'missing'"):
        resolve_handler("nothing:missing", model_dir)
    with pytest.raises(HandlerLoadError, match="Plain is a class without a handle method"):
        resolve_handler("nothing:Plain", model_dir)
    with pytest.raises(HandlerLoadError, match="VALUE is not a function or a class"):
        resolve_handler("nothing:VALUE", model_dir)


def test_missing_dependency_inside_the_module_is_not_masked(model_dir: Path) -> None:
    write(model_dir, "needs.py", "import surely_not_installed_pkg\n\ndef handle(d, c):\n    pass\n")
    with pytest.raises(HandlerLoadError) as info:
        resolve_handler("needs.py", model_dir)
    assert "No module named 'surely_not_installed_pkg'" in str(info.value)
    assert str(model_dir / "needs.py") in str(info.value)
    assert "needs.py" in info.value.details
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_broken_module_reports_the_original_error(model_dir: Path) -> None:
    write(model_dir, "syntax.py", "def handle(data, context)\n    return data\n")
    with pytest.raises(HandlerLoadError, match="SyntaxError") as info:
        resolve_handler("syntax.py", model_dir)
    assert "syntax.py" in info.value.details


@pytest.fixture
def builtin_package(tmp_path: Path, model_dir: Path) -> str:
    """A stand-in for jupyter_serve.handlers: a package with one handler class per module."""
    root = tmp_path / "builtins_root"
    write(root, "fake_builtins/__init__.py", "")
    write(
        root,
        "fake_builtins/base.py",
        "class BaseHandler:\n    def handle(self, d, c):\n        return ['base']\n",
    )
    write(
        root,
        "fake_builtins/image_classifier.py",
        "from .base import BaseHandler\n\n\nclass ImageClassifier(BaseHandler):\n"
        "    def handle(self, d, c):\n        return ['image']\n",
    )
    write(
        root,
        "fake_builtins/text_classifier.py",
        "import not_installed_tokenizer_lib\n",
    )
    sys.path.append(str(root))
    return "fake_builtins"


def test_builtin_handler_is_the_fallback_for_a_missing_module(
    model_dir: Path, builtin_package: str
) -> None:
    entry, handle = load_handler("image_classifier", model_dir, context(), builtin_package)
    assert (entry.module.__name__, entry.name) == (
        "fake_builtins.image_classifier",
        "ImageClassifier",
    )
    assert handle([], context()) == ["image"]


def test_base_handler_name_maps_to_the_base_module(model_dir: Path, builtin_package: str) -> None:
    entry = resolve_handler("base_handler", model_dir, builtin_package)
    assert (entry.module.__name__, entry.name) == ("fake_builtins.base", "BaseHandler")


def test_a_model_file_shadows_a_builtin_name(model_dir: Path, builtin_package: str) -> None:
    write(model_dir, "image_classifier.py", "def handle(d, c):\n    return ['mine']\n")
    entry = resolve_handler("image_classifier", model_dir, builtin_package)
    assert entry.module.__name__ == "image_classifier"


def test_builtin_with_a_missing_dependency_is_reported(
    model_dir: Path, builtin_package: str
) -> None:
    with pytest.raises(HandlerLoadError, match="not_installed_tokenizer_lib"):
        resolve_handler("text_classifier", model_dir, builtin_package)


def test_unknown_name_is_neither_local_nor_builtin(model_dir: Path, builtin_package: str) -> None:
    with pytest.raises(HandlerLoadError, match=r"'nowhere' not found: no nowhere\.py in"):
        resolve_handler("nowhere.py", model_dir, builtin_package)


def test_a_module_exporting_its_handler_class_via_all_is_accepted(model_dir: Path) -> None:
    write(
        model_dir, "impl.py", "class Impl:\n    def handle(self, d, c):\n        return ['impl']\n"
    )
    write(model_dir, "reexport.py", "from impl import Impl\n\n__all__ = ['Impl']\n")
    assert resolve_handler("reexport", model_dir).name == "Impl"


def test_handler_file_named_like_an_imported_module_is_refused(model_dir: Path) -> None:
    write(model_dir, "json.py", "def handle(d, c):\n    return d\n")
    with pytest.raises(HandlerLoadError, match="already imported module"):
        resolve_handler("json.py", model_dir)


def test_initialize_failure_names_entry_point_and_keeps_the_cause(model_dir: Path) -> None:
    write(
        model_dir,
        "bad_init.py",
        "class Bad:\n    def initialize(self, ctx):\n        raise MemoryError('huge')\n"
        "    def handle(self, d, c):\n        return d\n",
    )
    with pytest.raises(HandlerLoadError) as info:
        load_handler("bad_init", model_dir, context())
    assert str(info.value).startswith(f"{model_dir / 'bad_init.py'}:Bad.initialize(context)")
    assert "MemoryError: huge" in str(info.value)
    assert isinstance(info.value.__cause__, MemoryError)
    assert 'bad_init.py", line 3, in initialize' in info.value.details


def test_function_failing_at_load_is_a_load_error(model_dir: Path) -> None:
    write(model_dir, "bad_fn.py", "def handle(data, context):\n    return data[0]\n")
    with pytest.raises(HandlerLoadError, match=r"handle\(None, context\) failed at load"):
        load_handler("bad_fn", model_dir, context())


def test_find_entry_point_ignores_imported_classes(model_dir: Path) -> None:
    write(model_dir, "base_mod.py", "class Base:\n    def handle(self, d, c):\n        return 1\n")
    write(model_dir, "child.py", "from base_mod import Base\n\nclass Child(Base):\n    pass\n")
    module = resolve_handler("child", model_dir).module
    assert find_entry_point(module, None).name == "Child"
