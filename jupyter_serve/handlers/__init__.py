"""Model handlers (TorchServe's meaning): the classes and functions that run a model.

They run inside worker processes and never import tornado or jupyter_server.
This package is light: importing it imports neither torch nor any handler
module; each name below is imported on first access.

* `BaseHandler` (base), `VisionHandler` (vision): classes to subclass.
* The default handlers, one class per module so a manifest can name the
  module: `ImageClassifier` (image_classifier), `ImageSegmenter`
  (image_segmenter), `ObjectDetector` (object_detector), `TextClassifier`
  (text_classifier), and jupyter_serve's `CausalLM` (causal_lm, a Hugging Face language
  model; the `llm` extra).
* `handler_factory` (factory): a function entry point built from plain functions.
* `PredictionException` (exceptions), `load_label_mapping` and
  `map_class_to_label` (utils).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jupyter_serve.handlers.base import BaseHandler
    from jupyter_serve.handlers.causal_lm import CausalLM
    from jupyter_serve.handlers.exceptions import PredictionException
    from jupyter_serve.handlers.factory import handler_factory
    from jupyter_serve.handlers.image_classifier import ImageClassifier
    from jupyter_serve.handlers.image_segmenter import ImageSegmenter
    from jupyter_serve.handlers.object_detector import ObjectDetector
    from jupyter_serve.handlers.text_classifier import TextClassifier
    from jupyter_serve.handlers.utils import load_label_mapping, map_class_to_label
    from jupyter_serve.handlers.vision import VisionHandler

_LOCATIONS = {
    "BaseHandler": "base",
    "VisionHandler": "vision",
    "CausalLM": "causal_lm",
    "ImageClassifier": "image_classifier",
    "ImageSegmenter": "image_segmenter",
    "ObjectDetector": "object_detector",
    "TextClassifier": "text_classifier",
    "handler_factory": "factory",
    "PredictionException": "exceptions",
    "load_label_mapping": "utils",
    "map_class_to_label": "utils",
}

#: The built-in handler names a manifest may use, as TorchServe's default handlers.
DEFAULT_HANDLERS = (
    "image_classifier",
    "image_segmenter",
    "object_detector",
    "text_classifier",
    "causal_lm",
)

__all__ = [
    "DEFAULT_HANDLERS",
    "BaseHandler",
    "CausalLM",
    "ImageClassifier",
    "ImageSegmenter",
    "ObjectDetector",
    "PredictionException",
    "TextClassifier",
    "VisionHandler",
    "handler_factory",
    "load_label_mapping",
    "map_class_to_label",
]


def __getattr__(name: str) -> Any:
    module = _LOCATIONS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
