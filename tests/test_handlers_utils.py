"""Handler helpers: label mapping files, class-to-label mapping, row access, PredictionException."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_serve.handlers import PredictionException, load_label_mapping, map_class_to_label
from jupyter_serve.handlers.utils import decode_json, decode_text, explain_target, row_input


def test_load_label_mapping_reads_labels_and_imagenet_pairs(tmp_path: Path) -> None:
    path = tmp_path / "index_to_name.json"
    path.write_text(json.dumps({"0": "cat", 1: ["n02084071", "dog"]}))
    assert load_label_mapping(path) == {"0": "cat", "1": "dog"}


def test_load_label_mapping_accepts_the_legacy_list_form(tmp_path: Path) -> None:
    path = tmp_path / "index_to_name.json"
    path.write_text(json.dumps({"object_type_names": ["background", "person"]}))
    assert load_label_mapping(path) == {"0": "background", "1": "person"}


def test_load_label_mapping_without_a_file_is_none(tmp_path: Path) -> None:
    assert load_label_mapping(tmp_path / "missing.json") is None


@pytest.mark.parametrize("content", [["cat", "dog"], {"0": 3}])
def test_load_label_mapping_rejects_other_shapes(tmp_path: Path, content: object) -> None:
    path = tmp_path / "index_to_name.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=r"index_to_name\.json"):
        load_label_mapping(path)


def test_map_class_to_label() -> None:
    probs = [[0.1, 0.9], [0.7, 0.3]]
    assert map_class_to_label(probs) == [{"0": 0.1, "1": 0.9}, {"0": 0.7, "1": 0.3}]
    mapping = {"0": "cat", "1": "dog", "7": "cow"}
    assert map_class_to_label(probs, mapping) == [
        {"cat": 0.1, "dog": 0.9},
        {"cat": 0.7, "dog": 0.3},
    ]
    assert map_class_to_label([[0.6, 0.2]], mapping, [[7, 2]]) == [{"cow": 0.6, "2": 0.2}]


def test_map_class_to_label_rejects_flat_lists_and_bad_mappings() -> None:
    with pytest.raises(TypeError, match="list of lists"):
        map_class_to_label([0.1, 0.9])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="dict"):
        map_class_to_label([[0.1]], ["cat"])  # type: ignore[arg-type]


def test_row_input_prefers_data_then_body_and_keeps_falsy_data() -> None:
    assert row_input({"data": b"d", "body": b"b"}) == b"d"
    assert row_input({"body": b"b"}) == b"b"
    assert row_input({"data": 0, "body": b"b"}) == 0
    assert row_input([1, 2]) == [1, 2]


def test_decoding_helpers() -> None:
    assert decode_json(bytearray(b"[1, 2]")) == [1, 2]
    assert decode_json("{}") == {}
    assert decode_json([3]) == [3]
    assert decode_text(b"caf\xc3\xa9") == "café"
    assert decode_text({"text": "hi"}) == "hi"
    with pytest.raises(TypeError):
        decode_text([1])


def test_explain_target() -> None:
    assert explain_target({"data": 1}) == 0
    assert explain_target({"target": b"3"}) == 3
    assert explain_target({"target": 2}) == 2
    with pytest.raises(PredictionException) as info:
        explain_target({"target": "cat"})
    assert info.value.error_code == 400


def test_prediction_exception_carries_message_and_code() -> None:
    exc = PredictionException("bad input", 599)
    assert (exc.message, exc.error_code) == ("bad input", 599)
    assert PredictionException("x").error_code == 500
    assert str(exc) == "bad input : 599"


def test_get_yaml_config_reads_safely(tmp_path: Path) -> None:
    from jupyter_serve.handlers.utils import get_yaml_config

    config = tmp_path / "model-config.yaml"
    config.write_text("batchSize: 4\nhandler:\n  topk: 3\n")
    assert get_yaml_config(config) == {"batchSize": 4, "handler": {"topk": 3}}
    config.write_text("!!python/object/apply:os.system ['true']\n")
    with pytest.raises(Exception, match="python/object"):
        get_yaml_config(config)


def test_list_classes_from_module_keeps_own_classes_and_filters_by_parent() -> None:
    import types

    from jupyter_serve.handlers.utils import list_classes_from_module

    module = types.ModuleType("user_model")
    exec(
        "from collections import OrderedDict\n"
        "class Base: pass\n"
        "class Net(Base): pass\n"
        "class Helper: pass\n",
        module.__dict__,
    )
    for cls in (module.Base, module.Net, module.Helper):
        cls.__module__ = "user_model"
    names = sorted(c.__name__ for c in list_classes_from_module(module))
    assert names == ["Base", "Helper", "Net"]  # OrderedDict is imported, not defined here
    assert list_classes_from_module(module, module.Base) == [module.Net]
