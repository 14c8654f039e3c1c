"""`jupyter serve`: flag mapping, and a real server with the demo model stopped by Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_process import TOKEN, ServeProcess, alive, jupyter_command

from jupyter_serve.cli import parser, server_argv


def argv_for(*args: str) -> list[str]:
    parsed, rest = parser().parse_known_args(list(args))
    return server_argv(parsed, rest)


def test_torchserve_flags_become_serveapp_traits(tmp_path: Path) -> None:
    argv = argv_for(
        "--models", "a=x.mar", "y.mar", "--model-store", str(tmp_path), "--ncs",
        "--ts-config", "conf/config.properties", "--port", "9999",
    )  # fmt: skip
    assert argv[:5] == [
        "--ServeApp.load_models=a=x.mar",
        "--ServeApp.load_models=y.mar",
        f"--ServeApp.model_store={tmp_path}",
        f"--ServeApp.ts_config={Path('conf/config.properties').resolve()}",
        "--ServeApp.snapshots=False",
    ]
    assert argv[-2:] == ["--port", "9999"]  # the rest goes to the Jupyter server


def test_no_config_snapshots_long_form_and_root() -> None:
    argv = argv_for("--no-config-snapshots", "--no-browser")
    assert "--ServeApp.snapshots=False" in argv
    assert argv[-1] == "--no-browser"
    assert ("--allow-root" in argv) == (os.geteuid() == 0)
    assert argv_for("--allow-root").count("--allow-root") == 1


def test_demo_flag_and_no_flags_add_no_serve_traits() -> None:
    parsed, _ = parser().parse_known_args(["--demo"])
    assert parsed.demo is True
    assert not [arg for arg in argv_for() if arg.startswith("--ServeApp.")]


@pytest.fixture
def demo_server(tmp_path: Path) -> Iterator[ServeProcess]:
    server = ServeProcess(tmp_path, ["--demo"])
    try:
        yield server.start(models=1)
    finally:
        server.kill()


def test_jupyter_serve_demo_serves_and_ctrl_c_twice_leaves_no_worker_nor_factory(
    demo_server: ServeProcess, tmp_path: Path
) -> None:
    with demo_server.client() as client:
        assert client.get("ping").json() == {"status": "Healthy"}
        answer = client.post("predictions/demo", json=[6.5, 3.0, 5.8, 2.2])
        assert answer.status_code == 200, answer.text
        scores = answer.json()
        assert max(scores, key=scores.get) == "virginica"
    assert httpx.get(f"{demo_server.url}serve/ping").status_code == 403  # no token, no cookie
    assert (tmp_path / "model_store" / "demo.mar").is_file()
    snapshot = json.loads((tmp_path / "work" / "snapshot.json").read_text())
    assert list(snapshot["models"]) == ["demo"]
    pids = demo_server.worker_pids()
    factory = demo_server.factory_pids()
    assert (len(pids), len(factory)) == (2, 1)  # the demo model's worker and its factory
    demo_server.send(signal.SIGINT)
    demo_server.send(signal.SIGINT)  # a second Ctrl-C must not cut the cleanup short
    assert demo_server.stop() == 0
    assert alive(pids) == []


def test_help_lists_the_torchserve_flags_and_help_all_the_serveapp_traits() -> None:
    command = [*jupyter_command(), "serve"]
    short = subprocess.run([*command, "--help"], capture_output=True, text=True, check=True)
    assert "--model-store" in short.stdout
    assert "--no-config-snapshots" in short.stdout
    full = subprocess.run([*command, "--help-all"], capture_output=True, text=True, check=True)
    assert "--ServeApp.ts_config=<Unicode>" in full.stdout
    assert "--ServeApp.load_models=<list-item-1>" in full.stdout


def test_scripts_start_installs_notebook_7_and_its_tree_answers(tmp_path: Path) -> None:
    """The README says the panel works in Notebook 7: `scripts/start` installs the `lab`
    extra, which must bring `notebook` 7, and `jupyter serve` then answers `/tree`."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: pytest's own dependency
        import tomli as tomllib  # type: ignore[no-redef]

    root = Path(__file__).resolve().parent.parent
    assert '-e ".[lab]"' in (root / "scripts" / "start").read_text()
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert "notebook>=7,<8" in project["optional-dependencies"]["lab"]
    server = ServeProcess(tmp_path)
    try:
        server.start()
        tree = httpx.get(f"{server.url}tree", headers={"Authorization": f"token {TOKEN}"})
        assert tree.status_code == 200
        assert "<title>Home</title>" in tree.text  # Notebook 7's file browser
    finally:
        server.kill()
