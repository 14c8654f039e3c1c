"""The process boundary holds: what each side imports, proved in fresh interpreters.

The server process (pool, batcher) never loads model code; workers and handlers
never load tornado or jupyter_server; torch, PIL and captum load only when a
handler actually needs them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SERVER_SIDE = ("tornado", "jupyter_server")
MODEL_SIDE = ("torch", "PIL", "captum")
HANDLER_MODULES = (
    "base", "vision", "image_classifier", "image_segmenter", "object_detector",
    "text_classifier", "factory", "exceptions", "utils",
)  # fmt: skip


def heavy_modules_after(setup: str, watched: tuple[str, ...]) -> list[str]:
    """Which of `watched` a fresh interpreter has imported after running `setup`."""
    code = (
        f"import json, sys\n{setup}\nprint(json.dumps(sorted(set({watched!r}) & set(sys.modules))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout))


@pytest.mark.parametrize(
    ("setup", "watched"),
    [
        pytest.param(
            "import jupyter_serve, jupyter_serve.archive, jupyter_serve.wire.protocol",
            SERVER_SIDE + MODEL_SIDE,
            id="package-archive-protocol",
        ),
        pytest.param(
            "import jupyter_serve.server.pool, jupyter_serve.server.batching\n"
            "import jupyter_serve.server.models",
            SERVER_SIDE + MODEL_SIDE,
            id="pool-batcher-models",
        ),
        pytest.param(
            "import importlib\n"
            f"for name in {HANDLER_MODULES!r}:\n"
            "    importlib.import_module('jupyter_serve.handlers.' + name)",
            SERVER_SIDE + MODEL_SIDE,
            id="handlers",
        ),
        pytest.param(
            "import jupyter_serve.kernel.magics, jupyter_serve.kernel.client\n"
            "import jupyter_serve.kernel.workspace",
            (*SERVER_SIDE, "jupyter_server.serverapp", "torch"),
            id="kernel-side-magics-and-client",
        ),
        pytest.param(
            "import jupyter_serve.worker.__main__, jupyter_serve.worker.service\n"
            "from jupyter_serve.worker import compat\n"
            "compat.install()\n"
            "import ts.context, ts.utils.util, ts.torch_handler.base_handler, mms.service\n"
            "from ts.handler_utils.utils import send_intermediate_predict_response",
            (*SERVER_SIDE, "torch", "traitlets"),
            id="worker-with-ts-and-mms-shims",
        ),
        pytest.param(
            "from jupyter_serve.worker import warm\nwarm.warm_up()",
            (*SERVER_SIDE, "traitlets"),
            id="factory-after-its-warm-up",
        ),
    ],
)
def test_imports_stay_on_their_side(setup: str, watched: tuple[str, ...]) -> None:
    assert heavy_modules_after(setup, watched) == []
