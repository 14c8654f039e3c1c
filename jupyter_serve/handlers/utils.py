"""Small helpers shared by the default handlers: label mapping and batch-row access.

`load_label_mapping` and `map_class_to_label` follow TorchServe's
`ts.utils.util` semantics so that existing `index_to_name.json` files and
handler code behave the same. Standard library only (no torch).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jupyter_serve.handlers.exceptions import PredictionException

log = logging.getLogger(__name__)

LabelMapping = dict[str, str]


def load_label_mapping(path: str | Path) -> LabelMapping | None:
    """Read an `index_to_name.json` file into `{"0": "label", ...}`.

    Values may be a label or a list whose last item is the label (the ImageNet
    `["n01440764", "tench"]` form); the legacy `{"object_type_names": [...]}`
    form is accepted too. Keys are always strings.

    Returns:
        The mapping, or None (with a warning) when the file does not exist.

    Raises:
        ValueError: the file is not a JSON object of index -> label.
    """
    file = Path(path)
    if not file.is_file():
        log.warning("No label mapping at %s: predictions carry class indices", file)
        return None
    content = json.loads(file.read_text(encoding="utf-8"))
    if not isinstance(content, dict):
        raise ValueError(f"{file.name} must hold a JSON object of index -> label")
    names = content.get("object_type_names")
    if isinstance(names, list):
        return {str(index): _label(file, name) for index, name in enumerate(names)}
    return {str(key): _label(file, value) for key, value in content.items()}


def _label(file: Path, value: Any) -> str:
    if isinstance(value, list) and value:
        value = value[-1]
    if not isinstance(value, str):
        raise ValueError(f"Labels in {file.name} must be strings or lists of strings: {value!r}")
    return value


def map_class_to_label(
    probs: Sequence[Sequence[float]],
    mapping: Mapping[str, str] | None = None,
    lbl_classes: Sequence[Sequence[int]] | None = None,
) -> list[dict[str, float]]:
    """Turn per-row class probabilities into `[{label: prob, ...}, ...]`.

    Args:
        probs: One list of probabilities per row.
        mapping: Class index (as a string) -> label; without it labels are the
            indices as strings.
        lbl_classes: The class index of each probability (for top-k results);
            by default position i is class i.

    Raises:
        TypeError: `probs` is not a list of lists, or `mapping` is not a mapping.
    """
    if not all(isinstance(row, (list, tuple)) for row in probs):
        raise TypeError("map_class_to_label expects a list of lists of probabilities")
    if mapping is not None and not isinstance(mapping, Mapping):
        raise TypeError("The label mapping must be a dict of index -> label")
    classes: Iterable[Sequence[int]] = (
        lbl_classes if lbl_classes is not None else [range(len(row)) for row in probs]
    )
    return [
        {label_name(int(cls), mapping): prob for cls, prob in zip(row_classes, row, strict=True)}
        for row_classes, row in zip(classes, probs, strict=True)
    ]


def label_name(cls: int, mapping: Mapping[str, str] | None) -> str:
    """The label of class `cls`, or the index as a string when unmapped."""
    if mapping is None:
        return str(cls)
    return mapping.get(str(cls), str(cls))


def row_input(row: Any) -> Any:
    """The input of one batch row: its `"data"` field, else its `"body"`.

    A row that is not a dict (a handler called directly with plain values) is
    its own input. Unlike `row.get("data") or row.get("body")`, a falsy but
    present `data` value such as `0` or `""` is kept.
    """
    if not isinstance(row, Mapping):
        return row
    value = row.get("data")
    return row.get("body") if value is None else value


def decode_json(value: Any) -> Any:
    """`value`, parsed as JSON when it arrived as bytes or text."""
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8")
    if isinstance(value, str):
        return json.loads(value)
    return value


def decode_text(value: Any) -> str:
    """`value` as text: bytes are UTF-8 decoded, JSON strings unwrapped."""
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8")
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        return str(value["text"])
    raise TypeError(f"Expected text, got {type(value).__name__}")


def explain_target(row: Any) -> int:
    """The class an explanation is for: the row's `target` field, 0 when absent."""
    value = row.get("target") if isinstance(row, Mapping) else None
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8")
    if value is None or value == "":
        return 0
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        message = f"The explanation target must be an integer: {value!r}"
        raise PredictionException(message, 400) from exc


def get_yaml_config(yaml_file_path: str | Path) -> dict[str, Any]:
    """A YAML file as a dict, read safely (`ts.utils.util.get_yaml_config`)."""
    import yaml  # lazily: only handlers that read their own yaml need it

    with open(yaml_file_path, encoding="utf-8") as stream:
        loaded = yaml.safe_load(stream)
    return loaded if isinstance(loaded, dict) else {}


def list_classes_from_module(module: Any, parent_class: type | None = None) -> list[type]:
    """Classes defined in `module` itself, optionally only subclasses of `parent_class`.

    The same helper TorchServe handlers use to find the model class of a model file.
    """
    import inspect

    found = [
        member
        for _, member in inspect.getmembers(module, inspect.isclass)
        if member.__module__ == module.__name__
    ]
    if parent_class is None:
        return found
    return [cls for cls in found if issubclass(cls, parent_class) and cls is not parent_class]
