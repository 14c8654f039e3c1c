"""Export of a language model (handler `causal_lm`): the archive TorchServe runs as it is,
the Hugging Face runtime's InferenceService (KServe's own schema), the model folder it
reads, the README, and the handler file assembled from jupyter_serve's own modules.

A jupyter_serve server then serves the exported archive (its `causal_lm.py` beats the
built-in handler of that name) and answers what the built-in handler answered.
tests/test_export_lm_torchserve.py serves it on real TorchServe 0.12.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import tomllib
import yaml
from kserve_schema import validate_inference_service
from lm_models import archive_lm, greedy, tiny_lm
from mar_builder import build_handler_mar
from route_models import serve_state, server_config
from serve_process import ServeProcess

from jupyter_serve.archive import ArchiveSpec, build_mar, inspect_archive
from jupyter_serve.cli import main
from jupyter_serve.export import ExportItem, ExportOptions, NotExported, lm_handler, write_export
from jupyter_serve.export.lm_archive import REQUIREMENTS
from jupyter_serve.export.lm_handler import AssemblyError, bundled_modules, standalone_handler
from jupyter_serve.kernel.client import ServerInfo
from jupyter_serve.server.models import HANDLER_DEFAULTS, RegisterParams
from jupyter_serve.server.ts_config import read_properties

__all__ = ["tiny_lm"]

ROOT = Path(__file__).resolve().parent.parent
ECHO = "def handle(data, context):\n    return data\n"
PROMPT = "The list type"
# Imports the exported handler file with jupyter_serve unimportable and TorchServe's one
# import stood in for: what it needs beyond torch and transformers is nothing else.
ISOLATED_IMPORT = """
import sys, types
sys.modules["jupyter_serve"] = None
for name in ("ts", "ts.handler_utils", "ts.handler_utils.utils"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["ts.handler_utils.utils"].send_intermediate_predict_response = print
sys.path.insert(0, sys.argv[1])
import causal_lm
print(sorted(name for name in ("handle", "CausalLM", "Generation") if hasattr(causal_lm, name)))
"""


def copied(source: Path, name: str, **settings: Any) -> ExportItem:
    """An item whose archive is `source`, copied (as a server's download would be)."""

    def fetch(target: Path) -> None:
        if not source.exists():
            raise NotExported(f"its files are gone: {source}")
        shutil.copyfile(source, target)

    values: dict[str, Any] = {"default": True, **settings}
    return ExportItem(name=name, version="1.0", fetch=fetch, **values)


def members(mar: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(mar) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def documents(path: Path) -> list[dict[str, Any]]:
    found = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for service in found:
        validate_inference_service(service)
    return found


def test_the_archive_runs_on_torchserve_and_kserve_gets_a_hugging_face_service(
    tiny_lm: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    lm = archive_lm(tiny_lm, store)
    echo = store / build_handler_mar(store, "echo", ECHO)
    items = [copied(lm, "tinylm", batch_size=8, min_workers=1, worker_memory=900 * 2**20),
             copied(echo, "echo")]  # fmt: skip
    dest = tmp_path / "LM Export"
    write_export(dest, items, [], ExportOptions())

    files = members(dest / "model-store" / "tinylm.mar")
    hf_files = sorted(path.name for path in tiny_lm.iterdir() if path.is_file())
    assert sorted(files) == sorted([*hf_files, "MAR-INF/MANIFEST.json", "causal_lm.py",
                                    "requirements.txt", "model-config.yaml"])  # fmt: skip
    manifest = json.loads(files["MAR-INF/MANIFEST.json"])["model"]
    assert (manifest["handler"], manifest["requirementsFile"], manifest["configFile"]) == (
        "causal_lm", "requirements.txt", "model-config.yaml"
    )  # fmt: skip
    requirements = files["requirements.txt"].decode().splitlines()
    assert [line for line in requirements if not line.startswith("#")] == list(REQUIREMENTS)
    config = yaml.safe_load(files["model-config.yaml"])
    assert config == {"continuousBatching": True, "batchSize": 8, "useVenv": True}
    handler = files["causal_lm.py"].decode()
    assert handler == standalone_handler()
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(handler))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert not any(str(name).startswith("jupyter_serve") for name in imported)
    assert imported >= {"torch", "transformers", "ts.handler_utils.utils"}
    folder = tmp_path / "handler"
    folder.mkdir()
    (folder / "causal_lm.py").write_text(handler)
    out = subprocess.run([sys.executable, "-c", ISOLATED_IMPORT, str(folder)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.split("\n")[-2] == "['CausalLM', 'Generation', 'handle']"

    properties = read_properties(dest / "config" / "config.properties")
    assert properties["install_py_dep_per_model"] == "true"
    snapshot = json.loads(properties["model_snapshot"])["models"]["tinylm"]["1.0"]
    assert (snapshot["batchSize"], snapshot["marName"]) == (8, "tinylm.mar")

    torchserve, language = documents(dest / "inferenceservice.yaml")
    assert torchserve["metadata"]["name"] == "lm-export"
    assert torchserve["spec"]["predictor"]["model"]["modelFormat"] == {"name": "pytorch"}
    assert torchserve["spec"]["predictor"]["model"]["resources"]["limits"]["cpu"] == "1"
    assert language["metadata"]["name"] == "lm-export-tinylm"
    model = language["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "huggingface"}
    assert model["args"] == ["--model_name=tinylm", "--backend=huggingface"]
    assert model["storageUri"] == "gs://REPLACE-WITH-YOUR-BUCKET/lm-export/huggingface/tinylm"
    assert model["resources"]["limits"] == {"cpu": "1", "memory": "2048Mi"}
    assert "protocolVersion" not in model

    hf = dest / "huggingface" / "tinylm"
    assert sorted(path.name for path in hf.iterdir()) == hf_files
    assert all((hf / name).read_bytes() == (tiny_lm / name).read_bytes() for name in hf_files)

    readme = (dest / "README.md").read_text()
    assert "curl -N http://localhost:8085/predictions/tinylm" in readme
    assert '"prompt": "Once upon a time", "max_new_tokens": 32' in readme
    assert "TS_INSTALL_PY_DEP_PER_MODEL=false" in readme
    assert 'pip install "transformers>=5.23,<6" "tokenizers>=0.21"' in readme
    assert "- `lm-export-tinylm` serves tinylm from `huggingface/tinylm/`" in readme
    assert "/openai/v1/completions" in readme
    assert "/v1/models/echo:predict" in readme  # TorchServe's service: the other model


def test_the_archive_s_own_settings_and_requirements_stay(tiny_lm: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (tmp_path / "requirements.txt").write_text("numpy\ntransformers==5.24.0  # tested\n")
    config = "# mine\ncontinuousBatching: false\nhandler:\n  dtype: float32\n"
    files = ",".join(str(path) for path in sorted(tiny_lm.iterdir()))
    (tmp_path / "model-config.yaml").write_text(config)
    lm = build_mar(ArchiveSpec(model_name="chat", version="1.0", handler="causal_lm",
                               extra_files=files, export_path=str(store),
                               requirements_file=str(tmp_path / "requirements.txt"),
                               config_file=str(tmp_path / "model-config.yaml")))  # fmt: skip
    options = ExportOptions(protocol="v2", storage_uri="s3://bucket/out/", name="Chat")
    item = copied(lm, "chat", batch_size=2, device_type="gpu", device_ids=(0,))
    write_export(tmp_path / "out", [item], [], options)

    found = members(tmp_path / "out" / "model-store" / "chat.mar")
    text = found["model-config.yaml"].decode()
    assert text.startswith(config)  # appended to, comments and all
    assert yaml.safe_load(text) == {"continuousBatching": False, "handler": {"dtype": "float32"},
                                    "batchSize": 2, "useVenv": True}  # fmt: skip
    lines = found["requirements.txt"].decode().splitlines()
    assert [line for line in lines if not line.startswith("#")] == [
        "numpy", "transformers==5.24.0  # tested", "tokenizers>=0.21",
    ]  # fmt: skip

    [service] = documents(tmp_path / "out" / "inferenceservice.yaml")
    model = service["spec"]["predictor"]["model"]
    assert service["metadata"]["name"] == "chat"  # the only service: the export's name
    assert model["args"] == ["--model_name=chat"]  # on a GPU the runtime picks vLLM
    assert model["storageUri"] == "s3://bucket/out/huggingface/chat"
    assert model["resources"]["limits"]["nvidia.com/gpu"] == "1"
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "/v1/models/" not in readme  # no TorchServe service
    assert "/v2/models/" not in readme


def test_the_requirements_are_the_llm_extra_s() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert list(REQUIREMENTS) == project["optional-dependencies"]["llm"]


def test_the_file_bundles_what_the_handler_imports_and_refuses_what_it_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    assert bundled_modules()[-1] == "jupyter_serve.handlers.causal_lm"
    assert "jupyter_serve.wire.generation" in bundled_modules()
    package = tmp_path / "fakepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "base.py").write_text('"""Base."""\n\nVALUE = 1\n\n\ndef _helper():\n    return 1\n')
    (package / "twice.py").write_text("def _helper():\n    return 2\n")
    (package / "other.py").write_text("from jupyter_serve.worker.streaming import pass_chunk\n")
    roots = {
        "fakepkg.good": "from fakepkg.base import VALUE\n\nclass CausalLM:\n    pass\n",
        "fakepkg.clash": "from fakepkg.base import VALUE\nfrom fakepkg.twice import _helper\n",
        "fakepkg.cycle": "from fakepkg.cycle2 import X\n",
        "fakepkg.nested": "def f():\n    from fakepkg.base import VALUE\n",
        "fakepkg.whole": "from fakepkg import base\n",
    }
    (package / "cycle2.py").write_text("from fakepkg.cycle import Y\n")
    for module, text in roots.items():
        (package / f"{module.split('.')[1]}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    request.addfinalizer(lambda: sys.modules.pop("fakepkg", None))  # finding specs imports it
    monkeypatch.setattr(lm_handler, "PACKAGE", "fakepkg")
    monkeypatch.setattr(lm_handler, "ROOT", "fakepkg.good")
    assert bundled_modules() == ["fakepkg.base", "fakepkg.good"]
    assert "\n# Base.\n\nVALUE = 1\n" in standalone_handler()
    refused = {
        "fakepkg.clash": "fakepkg/twice.py defines _helper, which an earlier bundled module",
        "fakepkg.cycle": "import each other: fakepkg.cycle -> fakepkg.cycle2 -> fakepkg.cycle",
        "fakepkg.nested": "fakepkg/nested.py imports fakepkg inside a function (line 2)",
        "fakepkg.whole": "imports the module fakepkg.base: import its names instead",
    }
    for root, message in refused.items():
        monkeypatch.setattr(lm_handler, "ROOT", root)
        with pytest.raises(AssemblyError, match=re.escape(message)):
            standalone_handler()
    monkeypatch.setattr(lm_handler, "PACKAGE", "jupyter_serve")
    monkeypatch.setattr(lm_handler, "ROOT", "fakepkg.other")
    with pytest.raises(AssemblyError, match=r"pass_chunk from jupyter_serve\.worker\.streaming"):
        standalone_handler()


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


async def test_jupyter_serve_serves_the_exported_archive_as_it_served_the_built_in(
    jp_serverapp: Any, live_server: ServerInfo, tiny_lm: Path, tmp_path: Path
) -> None:
    registry, store = serve_state(jp_serverapp)
    archive_lm(tiny_lm, store)
    await registry.register("tinylm.mar", RegisterParams(initial_workers=1))
    dest = tmp_path / "out"
    server = ["--url", live_server.url, "--token", live_server.token]
    assert await asyncio.to_thread(main, ["export", str(dest), *server]) == 0
    assert "causal_lm.py" in {name for name, _ in inspect_archive(
        dest / "model-store" / "tinylm.mar").files}  # fmt: skip
    shutil.copyfile(dest / "model-store" / "tinylm.mar", store / "back.mar")
    await registry.register("back.mar", RegisterParams(model_name="back", initial_workers=1))
    [back] = registry.describe("back")
    default = HANDLER_DEFAULTS["causal_lm"]["batch_size"]
    assert (back["batchSize"], back["continuousBatching"]) == (default, True)

    body = {"prompt": PROMPT, "max_new_tokens": 12}
    token = {"Authorization": f"token {live_server.token}"}
    async with httpx.AsyncClient(headers=token, timeout=120) as client:
        replies = await asyncio.gather(*[
            client.post(f"{live_server.url}serve/predictions/{name}", json=body)
            for name in ("tinylm", "back")
        ])  # fmt: skip
    assert [reply.status_code for reply in replies] == [200, 200]
    assert replies[0].text == replies[1].text == greedy(tiny_lm, 12, prompt=PROMPT)


async def test_the_export_serves_again_with_ts_config(
    jp_serverapp: Any, live_server: ServerInfo, tiny_lm: Path, tmp_path: Path
) -> None:
    """`jupyter serve --ts-config` on the export serves the language model with the same
    settings, on the OpenAI routes too, answering what the built-in handler answered."""
    registry, store = serve_state(jp_serverapp)
    archive_lm(tiny_lm, store, config="maxBatchDelay: 20\nresponseTimeout: 90\n")
    await registry.register("tinylm.mar", RegisterParams(initial_workers=1))
    [before] = registry.describe("tinylm")
    dest = tmp_path / "out"
    server = ["--url", live_server.url, "--token", live_server.token]
    assert await asyncio.to_thread(main, ["export", str(dest), *server]) == 0

    config = ["--ts-config", str(dest / "config/config.properties")]
    back = ServeProcess(tmp_path / "back", args=[*config, "--model-store",
                                                  str(dest / "model-store")])  # fmt: skip
    messages = [{"role": "user", "content": "What is a tuple?"}]
    body = {"model": "tinylm", "messages": messages, "max_tokens": 12, "temperature": 0}
    try:
        await asyncio.to_thread(back.start, models=1)
        with back.client() as http:
            [again] = http.get("models/tinylm").json()
            listed = http.get("v1/models").json()
            answer = await asyncio.to_thread(http.post, "v1/chat/completions", json=body)
    finally:
        back.kill()
    for key in ("modelVersion", "batchSize", "maxBatchDelay", "responseTimeout", "minWorkers",
                "maxWorkers", "continuousBatching"):  # fmt: skip
        assert again[key] == before[key], key
    assert again["continuousBatching"] is True
    assert [model["id"] for model in listed["data"]] == ["tinylm", "tinylm/1.0"]
    assert answer.status_code == 200, answer.text
    content = answer.json()["choices"][0]["message"]["content"]
    assert content == greedy(tiny_lm, 12, messages=messages)
