"""The demo model: a tiny plain-torch iris classifier archived as `demo.mar`.

`build_demo(model_store)` writes `<model_store>/demo.mar` (replacing an older
one) without importing torch here: the handler builds its `torch.nn.Linear(4, 3)`
from fixed weights when its worker loads it, so the archive holds only the
handler file and a model-config.yaml. `jupyter serve --demo` builds it and
loads it at start as model "demo".

Input: a JSON list of the four iris measurements (sepal length, sepal width,
petal length, petal width, in cm), also as `{"data": [...]}` or KServe's
`{"instances": [[...]]}` (first row), as the raw body or a form field `data`.
Output per request: `{label: probability}` over setosa, versicolor, virginica.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from jupyter_serve.archive import ArchiveSpec, build_mar

__all__ = ["DEMO_MODEL", "DEMO_VERSION", "HANDLER_SOURCE", "build_demo"]

DEMO_MODEL = "demo"
DEMO_VERSION = "1.0"

HANDLER_SOURCE = '''"""jupyter_serve's demo handler: an iris classifier with fixed weights."""

import json

import torch

LABELS = ["setosa", "versicolor", "virginica"]
# Logits from petal length and width: setosa when short, virginica when long and wide.
WEIGHT = [[0.0, 0.0, -4.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 2.0, 2.0]]
BIAS = [10.0, 0.0, -14.0]


class IrisDemo:
    def initialize(self, context):
        self.model = torch.nn.Linear(4, 3)
        with torch.no_grad():
            self.model.weight.copy_(torch.tensor(WEIGHT))
            self.model.bias.copy_(torch.tensor(BIAS))
        self.model.eval()

    def handle(self, data, context):
        if _describing(context):  # GET models/demo?customized=true
            return [{"model": "iris classifier", "inputs": "4 features", "labels": LABELS}]
        rows = [_features(row.get("data") or row.get("body")) for row in data]
        with torch.inference_mode():
            probs = torch.softmax(self.model(torch.tensor(rows, dtype=torch.float32)), dim=1)
        return [{label: round(p, 4) for label, p in zip(LABELS, row)} for row in probs.tolist()]


def _describing(context):
    return context is not None and context.get_request_header(0, "describe") == "True"


def _features(value):
    if isinstance(value, (bytes, bytearray, str)):
        value = json.loads(value)
    if isinstance(value, dict):
        value = value.get("data", value.get("instances"))
    if value and isinstance(value[0], list):
        value = value[0]
    return [float(x) for x in value]
'''

CONFIG = "minWorkers: 1\nmaxWorkers: 1\nbatchSize: 8\nmaxBatchDelay: 20\n"


def build_demo(model_store: str | Path) -> Path:
    """Write `<model_store>/demo.mar` (replacing an older one); returns its path."""
    store = Path(model_store)
    store.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jupyter_serve_demo_") as folder:
        handler = Path(folder) / "iris_demo.py"
        handler.write_text(HANDLER_SOURCE, encoding="utf-8")
        config = Path(folder) / "model-config.yaml"
        config.write_text(CONFIG, encoding="utf-8")
        spec = ArchiveSpec(
            model_name=DEMO_MODEL,
            version=DEMO_VERSION,
            handler=str(handler),
            config_file=str(config),
            export_path=str(store),
            force=True,
        )
        return build_mar(spec)
