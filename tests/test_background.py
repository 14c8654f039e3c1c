"""A kernel without a Jupyter server starts its own jupyter_serve server on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_serve.kernel.background import start_background_server
from jupyter_serve.kernel.client import ServeClient, ServeClientError, ServerInfo


@pytest.fixture
def isolated_jupyter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No Jupyter server to discover: empty runtime dir, no parent server, no env URL."""
    for name in ("JUPYTER_SERVE_URL", "JUPYTER_SERVE_TOKEN", "JPY_PARENT_PID"):
        monkeypatch.delenv(name, raising=False)
    for name in ("CONFIG", "DATA", "RUNTIME"):
        monkeypatch.setenv(f"JUPYTER_{name}_DIR", str(tmp_path / name.lower()))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_background_server_listens_on_loopback_with_a_fresh_token(isolated_jupyter: Path) -> None:
    first = start_background_server(isolated_jupyter)
    try:
        assert first.info.url.startswith("http://127.0.0.1:")
        assert len(first.info.token) >= 32
        assert ServeClient(first.info, timeout=30).ping() == {"status": "Healthy"}
        with pytest.raises(ServeClientError) as refused:
            ServeClient(ServerInfo(first.info.url, "wrong"), timeout=30).ping()
        assert refused.value.status == 403
    finally:
        first.stop()
    assert first.process.poll() is not None


@pytest.fixture
def plain_shell(isolated_jupyter: Path) -> Iterator[InteractiveShell]:
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_serve")
    yield shell
    magics = shell.magics_manager.registry["ServeMagics"]
    if magics.background is not None:
        magics.background.stop()
    InteractiveShell.clear_instance()


def test_magics_without_a_server_start_one_and_say_where(
    plain_shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    assert plain_shell.run_line_magic("serve", "list") == []
    out = capsys.readouterr().out
    assert "No Jupyter server found: starting a jupyter_serve server on loopback" in out
    url = os.environ["JUPYTER_SERVE_URL"]
    assert url.startswith("http://127.0.0.1:")
    assert f"Serving at {url}" in out
    assert os.environ["JUPYTER_SERVE_TOKEN"] not in out  # the token is not printed
