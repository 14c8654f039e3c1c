"""Shared fixtures: the pytest-jupyter server with jupyter_serve enabled, archive inputs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytest_jupyter.jupyter_server"]


# The worker factory (a warm interpreter with torch imported that forks workers) is
# tested on purpose in test_pool_factory.py, test_app.py and the `jupyter serve`
# subprocess tests; elsewhere its `import torch` would only add a process and seconds
# to tests about something else: their workers start fresh.
NO_FACTORY = {"fork_workers": False}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"jupyter_serve": True}}, "ServeApp": NO_FACTORY}


@pytest.fixture
def http_server(http_server: Any, jp_serverapp: Any) -> Iterator[Any]:
    """pytest-jupyter's HTTP server with the serve lane reading its connections first, as
    `jupyter serve` has it: every `jp_fetch` test runs through the lane or its handover."""
    app = jp_serverapp.web_app.settings.get("serve_app")
    lane = app.attach_lane(http_server) if app is not None else None
    yield http_server
    if lane is not None:
        lane.detach()


@pytest.fixture
def live_server(
    jp_serverapp: Any, http_server_client: Any, jp_http_port: int, jp_base_url: str
) -> Any:
    """The in-process server as a kernel's client finds it: its URL and token (a
    `ServerInfo`), for tests of the client, the CLI and the magics."""
    from jupyter_serve.kernel.client import ServerInfo

    url = f"http://localhost:{jp_http_port}{jp_base_url}"
    return ServerInfo(url, jp_serverapp.identity_provider.token)


@pytest.fixture
def client(live_server: Any) -> Any:
    """A `ServeClient` of `live_server`, as the magics and the CLI make one."""
    from jupyter_serve.kernel.client import ServeClient

    return ServeClient(live_server)


@pytest.fixture
def model_inputs(tmp_path: Path) -> Path:
    """A folder with everything torch-model-archiver users pass: files, folders, junk to skip."""
    src = tmp_path / "src"
    (src / "extra" / "nested" / "deeper").mkdir(parents=True)
    (src / "extra" / "__pycache__").mkdir()
    (src / "extra" / ".git").mkdir()
    (src / "handler.py").write_text("def handle(data, context):\n    return data\n")
    (src / "model.py").write_text("import torch\n\nclass Net(torch.nn.Module):\n    pass\n")
    (src / "weights.pt").write_bytes(b"\x80\x02fake-state-dict" * 64)
    (src / "index_to_name.json").write_text('{"0": "cat", "1": "dog"}')
    (src / "requirements.txt").write_text("numpy\n")
    (src / "model-config.yaml").write_text("batchSize: 4\nmaxBatchDelay: 50\n")
    (src / "vocab.txt").write_text("a\nb\n")
    (src / "labels.csv").write_text("0,cat\n")
    (src / "extra" / "tokenizer.json").write_text("{}")
    (src / "extra" / ".keep").write_text("")
    (src / "extra" / "nested" / "merges.txt").write_text("m")
    (src / "extra" / "nested" / "deeper" / "x.bin").write_bytes(b"\x00" * 10)
    (src / "extra" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"pyc")
    (src / "extra" / ".git" / "HEAD").write_text("ref")
    return src
