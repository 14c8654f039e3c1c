"""The Binder environment, built from `binder/` the way repo2docker builds it, then used.

repo2docker copies the repository, makes the environment of `binder/environment.yml`
(Python 3.11, node, pip), runs `binder/postBuild` in the repository and starts the
server through `binder/start`. Here: the repository's files are copied to a temporary
folder, a fresh venv stands in for the conda environment (this machine's Python and
node), `binder/postBuild` runs unchanged in it (with `TORCH_INDEX_URL=""`: torch from
the default index, the only one reachable), and `binder/start jupyter lab` of that
venv serves the copy, under a JupyterHub-like base URL. Then every notebook runs in
a kernel of that venv against that server, and chromium checks that JupyterLab opens
with the Serving panel showing the demo model, which answers from its Try-it tab.

Marked `binder`: it builds a whole environment (about 3 to 5 minutes), so it runs
with `CI=true` or `JUPYTER_SERVE_BINDER=1` and is skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_browser import (  # jp_*: pytest-jupyter's loop fixtures, switched off here
    TIMEOUT,
    Lab,
    browser_page,
    jp_asyncio_loop,  # noqa: F401
    jp_server_cleanup,  # noqa: F401
)
from serve_process import TOKEN, ServeProcess

from jupyter_serve.kernel.client import TOKEN_ENV, URL_ENV

ROOT = Path(__file__).resolve().parent.parent
OPT_IN = "JUPYTER_SERVE_BINDER"
BASE_URL = "/user/binder-check/"  # as JupyterHub serves a Binder session
NOTEBOOKS = sorted(path.name for path in (ROOT / "notebooks").glob("*.ipynb"))
BUILD_TIMEOUT = 1500  # seconds; only a guard against a hung install


def _skip_reason() -> str | None:
    if os.environ.get("CI") == "true" or os.environ.get(OPT_IN) == "1":
        return None
    return f"builds a whole Binder environment: set {OPT_IN}=1 (CI=true always runs it)"


pytestmark = [
    pytest.mark.binder,
    pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or ""),
]


def _copy_repository(target: Path) -> Path:
    """The repository's files (tracked and new, not ignored), as repo2docker copies them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    )  # fmt: skip
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _venv_env(venv: Path) -> dict[str, str]:
    """This process's environment with the venv first on PATH, as if activated."""
    prefixes = ("JPY_", "PYTHON", "JUPYTER_SERVE_")  # JUPYTER_SERVE_URL: magics tests set it
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.pop("VIRTUAL_ENV", None)
    return {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}"}


@pytest.fixture(scope="module")
def binder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the repository copy, the venv) after `binder/postBuild` ran."""
    base = tmp_path_factory.mktemp("binder")
    repo = _copy_repository(base / "repo")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    log = base / "postBuild.log"
    with log.open("w") as out:
        done = subprocess.run(
            [str(repo / "binder" / "postBuild")],
            cwd=repo, env={**_venv_env(venv), "TORCH_INDEX_URL": ""},
            stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT,
        )  # fmt: skip
    assert done.returncode == 0, log.read_text()[-5000:]
    return repo, venv


@pytest.fixture(scope="module")
def server(binder: tuple[Path, Path]) -> Iterator[ServeProcess]:
    repo, venv = binder
    args = [f"--ServerApp.base_url={BASE_URL}"]
    if os.geteuid() == 0:
        args.append("--allow-root")
    command = [str(repo / "binder" / "start"), str(venv / "bin" / "jupyter"), "lab"]
    process = ServeProcess(repo, args, command=command, env=_venv_env(venv))
    try:
        process.start(models=1)
        yield process
    finally:
        process.kill()


def test_postbuild_installs_the_labextension(binder: tuple[Path, Path]) -> None:
    _, venv = binder
    listed = subprocess.run(
        [str(venv / "bin" / "jupyter"), "labextension", "list"],
        capture_output=True, text=True, check=True, env=_venv_env(venv),
    )  # fmt: skip
    assert "jupyter_serve v" in listed.stdout + listed.stderr
    assert "(python, jupyter_serve)" in listed.stdout + listed.stderr
    static = venv / "share" / "jupyter" / "labextensions" / "jupyter_serve" / "static"
    assert (static / "style.js").exists()


def test_start_serves_the_demo_model(server: ServeProcess) -> None:
    import httpx

    headers = {"Authorization": f"token {TOKEN}"}
    url = f"{server.url.rstrip('/')}{BASE_URL}serve/"
    with httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT / 1000) as client:
        described = client.get("models/demo").json()[0]
        answer = client.post("predictions/demo", content="[6.5, 3.0, 5.8, 2.2]").json()
    assert described["workers"][0]["status"] == "READY"
    assert max(answer, key=answer.get) == "virginica"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_notebooks_run_in_it(
    notebook: str, binder: tuple[Path, Path], server: ServeProcess
) -> None:
    repo, venv = binder
    folder = repo / "notebook-runs" / Path(notebook).stem  # below the root: work folders
    folder.mkdir(parents=True)
    shutil.copy(repo / "notebooks" / notebook, folder / notebook)
    env = {
        **_venv_env(venv),
        URL_ENV: f"{server.url.rstrip('/')}{BASE_URL}",
        TOKEN_ENV: TOKEN,
    }
    ran = subprocess.run(
        [str(venv / "bin" / "jupyter"), "execute", "--kernel_name=python3", notebook],
        cwd=folder, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-5000:]


def test_jupyterlab_opens_with_the_panel_showing_the_demo(server: ServeProcess) -> None:
    from playwright.sync_api import expect

    with browser_page() as page:
        lab = Lab(page, server)
        lab.open(base_url=BASE_URL)
        demo = lab.card("demo", "1.0")  # the panel opened by itself (postBuild's settings)
        expect(demo).to_have_attribute("data-status", "healthy", timeout=TIMEOUT)
        assert lab.console_errors == []
        demo.locator(".jp-ServeModel-try").click()
        tab = page.locator(".jp-ServeTry:visible")
        tab.locator("textarea").fill("[6.5, 3.0, 5.8, 2.2]")
        tab.locator(".jp-ServeTry-send").click()
        expect(tab.locator(".jp-ServeTry-status")).to_have_attribute(
            "data-status", "200", timeout=TIMEOUT
        )
        answer = json.loads(tab.locator(".jp-ServeTry-answer").inner_text())
        assert max(answer, key=answer.get) == "virginica"
        lab.screenshot("binder-lab")
