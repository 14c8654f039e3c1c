"""The Serving panel in JupyterLab under a real JupyterHub 6 (issue 24): what its copied curl
tells a hub user.

One hub (tests/hub_process.py) spawns `ann`'s server running `jupyter lab` with
jupyter_serve and the demo model; Debian's chromium (tests/lab_browser.py) logs in
through the hub's login page, opens the panel, a Try-it tab, sends, and copies the
curl command through the UI. The copied text must read `$HUB_TOKEN` (a hub session has
no `JUPYTER_TOKEN`), name the hub's token page, and hold no credential of the session:
neither the login cookies nor the XSRF token nor an API token; and, pasted into bash
with `HUB_TOKEN` set to a token of ann's from the hub, it runs the prediction. Skipped, with the
reason, without chromium, playwright, jupyterhub or configurable-http-proxy, unless
CI=true.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hub_process import HubProcess, available
from lab_browser import (  # jp_*: pytest-jupyter's loop fixtures, switched off here
    CHROMIUM,
    TIMEOUT,
    Lab,
    browser_page,
    jp_asyncio_loop,  # noqa: F401
    jp_server_cleanup,  # noqa: F401
    lab_settings,
    playwright_expect,
)

from jupyter_serve.demo import build_demo

expect = playwright_expect()
MISSING = available() or (None if Path(CHROMIUM).exists() else f"no {CHROMIUM}")
pytestmark = pytest.mark.skipif(
    MISSING is not None and os.environ.get("CI") != "true",
    reason=f"a real JupyterHub and chromium are needed: {MISSING} (CI=true runs it anyway)",
)
PASSWORD = "hub-browser-password"
TESTER = ["admin:users", "admin:servers", "tokens", "read:servers"]  # makes tokens, spawns


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    """The hub with ann's server spawned, serving the demo model."""
    folder = tmp_path_factory.mktemp("hub")
    build_demo(folder / "store")
    settings = {
        "Authenticator.allowed_users": {"ann"},
        "JupyterHub.authenticator_class": "dummy",
        "DummyAuthenticator.password": PASSWORD,
        "JupyterHub.load_roles": [{"name": "tester", "services": ["tester"], "scopes": TESTER}],
        "Spawner.args": [
            "--allow-root",  # these machines and CI run as root
            "--ServerApp.authorizer_class=jupyter_serve.hub.HubScopesAuthorizer",
            f"--ServeApp.model_store={folder / 'store'}",
            "--ServeApp.load_models=demo.mar",
            "--ServeApp.snapshots=False",
            f"--LabApp.app_settings_dir={lab_settings(folder)}",  # no news popup
        ],
    }  # fmt: skip
    with HubProcess.serving(folder, settings, "ann") as hub:
        yield hub


@pytest.fixture(scope="module")
def lab(hub: HubProcess) -> Iterator[Lab]:
    """JupyterLab of ann's server, after logging in through the hub's login page."""
    with browser_page() as page:
        page.set_default_timeout(TIMEOUT)
        page.goto(f"{hub.url}/hub/login")
        page.fill("#username_input", "ann")
        page.fill("#password_input", PASSWORD)
        page.click("#login_submit")
        page.goto(f"{hub.url}/user/ann/lab")
        page.locator("#jp-main-dock-panel").wait_for()
        yield Lab(page, None)  # type: ignore[arg-type]  # Lab.open: the hub logged in


@pytest.fixture(scope="module")
def try_it(lab: Lab) -> Any:
    """The demo's Try-it tab, after one prediction sent from it as the logged-in user."""
    lab.open_panel()
    lab.card("demo", "1.0").locator(".jp-ServeModel-try").click()
    tab = lab.page.locator(".jp-ServeTry:visible")
    tab.locator(".jp-ServeTry-body").fill("[6.5, 3.0, 5.8, 2.2]")
    tab.locator(".jp-ServeTry-send").click()
    expect(tab.locator(".jp-ServeTry-status")).to_have_attribute("data-status", "200")
    return tab


def copied(page: Any, button: Any) -> str:
    """The text `button`'s click puts on the clipboard: the copy event's data, read after
    JupyterLab's own handler (on document.body) has set it."""
    page.evaluate(
        "window.addEventListener('copy', e => { window.copiedText ="
        " e.clipboardData.getData('text'); }, { once: true })"
    )
    button.click()
    page.wait_for_function("window.copiedText !== undefined")
    return str(page.evaluate("window.copiedText"))


def test_the_copied_curl_reads_the_hub_token_and_names_the_token_page(
    hub: HubProcess, lab: Lab, try_it: Any
) -> None:
    tab = try_it
    text = copied(lab.page, tab.locator(".jp-ServeTry-copy"))
    lab.notification("Copied the curl command (set HUB_TOKEN first)")
    note, command = text.split("\n", 1)
    assert note == (
        f"# HUB_TOKEN: a token from {hub.url}/hub/token or an inference key of this server"
    )
    assert '-H "Authorization: token $HUB_TOKEN"' in command
    assert f"'{hub.url}/user/ann/serve/predictions/demo/1.0'" in command
    assert "JUPYTER_TOKEN" not in text
    secrets = [cookie["value"] for cookie in lab.page.context.cookies()]
    assert secrets
    assert not [secret for secret in secrets if secret and secret in text]
    assert tab.locator(".jp-ServeTry-curl").inner_text() == text
    lab.screenshot("try-it-hub", tab)


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_the_copied_curl_runs_with_a_hub_token(hub: HubProcess, lab: Lab, try_it: Any) -> None:
    text = copied(lab.page, try_it.locator(".jp-ServeTry-copy"))
    env = {"PATH": os.environ["PATH"], "HUB_TOKEN": hub.token("ann")}
    ran = subprocess.run(["bash", "-c", f"{text} -sS --fail"], env=env, capture_output=True,
                         timeout=TIMEOUT / 1000, check=True)  # fmt: skip
    assert set(json.loads(ran.stdout)) == {"setosa", "versicolor", "virginica"}
