"""Tiny `ts` and `mms` packages so handlers written for TorchServe or MMS run unchanged.

Only the worker process calls `install()`, which appends this folder to the end
of `sys.path`: a real `torchserve` (or `multi-model-server`) installation comes
earlier on the path and always wins, and the Jupyter server never sees the shim.

What the shim offers, each name imported lazily on first use (so a subset works
even while some of `jupyter_serve.handlers` is missing)::

    ts.context                            Context, RequestProcessor
    ts.torch_handler.base_handler         BaseHandler           (jupyter_serve.handlers.base)
    ts.torch_handler.vision_handler       VisionHandler         (.handlers.vision)
    ts.torch_handler.image_classifier     ImageClassifier       (.handlers.image_classifier)
    ts.torch_handler.image_segmenter      ImageSegmenter        (.handlers.image_segmenter)
    ts.torch_handler.object_detector      ObjectDetector        (.handlers.object_detector)
    ts.torch_handler.text_classifier      TextClassifier        (.handlers.text_classifier)
    ts.torch_handler.text_handler         TextHandler           (.handlers.text_handler)
    ts.utils.util                         PredictionException   (.handlers.exceptions),
                                          load_label_mapping, map_class_to_label, ...
                                                                (.handlers.utils)
    ts.handler_utils.utils                send_intermediate_predict_response
                                                                (.worker.streaming)
    ts.handler_utils.timer                timed                 (.handlers.timer)
    ts.torch_handler.request_envelope.*   BaseEnvelope, BodyEnvelope, JSONEnvelope,
                                          KServeEnvelope, KServev2Envelope
                                                                (.handlers.envelopes)
    ts.metrics.dimension                  Dimension
    ts.metrics.metric_type_enum           MetricTypes
    mms.context                           Context, RequestProcessor
    mms.service                           PredictionException
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

FOLDER = str(Path(__file__).resolve().parent)


def install() -> None:
    """Make `import ts` and `import mms` find the shim unless real packages exist."""
    if FOLDER not in sys.path:
        sys.path.append(FOLDER)


def forwarder(
    module: str, default: str | None, targets: Mapping[str, str] | None = None
) -> Callable[[str], Any]:
    """A module `__getattr__` that imports names from their real modules on first use.

    `targets` maps a name to the module that defines it; other names come from
    `default` (None: only `targets`).
    """
    table = dict(targets or {})

    def __getattr__(name: str) -> Any:
        source = table.get(name, default)
        if source is None or name.startswith("__"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        setattr(sys.modules[module], name, value)
        return value

    return __getattr__
