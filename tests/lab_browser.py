"""A real `jupyter lab` with jupyter_serve, and Debian's chromium driving it (Python playwright).

`LabServer` is `serve_process.ServeProcess` running `jupyter lab` under a non-default
`base_url`, with the demo model loaded at start and a private settings folder: no
"Jupyter news" popup, and no token in the page (`page_config.json` empties it, as
JupyterHub does), so every request of the extension must authenticate with the login
cookie and the XSRF header, as `ServerConnection` sends them. The browser logs in once
through `?token=` (which sets the cookie) and then works from the page alone.

`chromium()` launches `/usr/bin/chromium` (never a browser download); `Lab` holds one
page and the steps the tests share (open the panel, find a model's card, answer a
dialog, read notifications). Waiting is playwright's: selectors and `expect`, each
bounded by `TIMEOUT`, never a sleep. Screenshots go to `build/screenshots/`
(git-ignored) for a reviewer.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from serve_process import TOKEN, ServeProcess, jupyter_command

from jupyter_serve.archive import ArchiveSpec, build_mar
from jupyter_serve.demo import HANDLER_SOURCE, build_demo
from jupyter_serve.kernel.client import TOKEN_ENV, URL_ENV

BASE_URL = "/jp/serve-panel/"  # non-default: every URL the extension builds must honour it
TIMEOUT = 60_000  # ms; only a guard (a loaded machine renders JupyterLab in ~15 s)
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parent.parent / "build" / "screenshots"
# The panel's settings (labextension/schema/plugin.json) as an admin would override them.
PANEL_SETTINGS = {"refreshInterval": 1, "defaultWorkers": 1, "defaultBatchSize": 2}

# The demo handler printing one line per batch, so its log grows with every prediction.
PRINTING_HANDLER = HANDLER_SOURCE.replace(
    "    def handle(self, data, context):\n",
    "    def handle(self, data, context):\n        print(f'handled {len(data)} request(s)')\n",
)


def picture(size: tuple[int, int], colour: str = "red") -> bytes:
    """A PNG of one colour."""
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


# A torch-free handler: its explanations are a 4x4 attribution map (the heat map), and the
# text "picture" gets a 3x2 PNG back (an image answer).
HEAT_HANDLER = """
MAP = [[1.0, -1.0, 0.5, 0.0], [0.0, 2.0, -2.0, 1.0], [0.2, 0.4, -0.4, 0.0], [3.0, 0.0, 0.0, -3.0]]
PNG = PNG_BYTES


def handle(data, context):
    if not data:
        return None
    answers = []
    for index, row in enumerate(data):
        body = row.get("body") or b""
        if context.get_request_header(index, "explain") == "True":
            answers.append(MAP)
        elif body in ("picture", b"picture"):
            context.set_response_content_type(index, "image/png")
            answers.append(PNG)
        else:
            answers.append({"bytes": len(body)})
    return answers
""".replace("PNG_BYTES", repr(picture((3, 2))))


@pytest.fixture(autouse=True)
def jp_asyncio_loop() -> None:
    """No pytest-jupyter event loop in the browser tests (their modules import this
    fixture): the server is a subprocess, and playwright's sync API runs its own loop,
    which pytest-jupyter's teardown would find running."""


@pytest.fixture(autouse=True)
def jp_server_cleanup() -> None:
    """Nothing in-process to clean up (see `jp_asyncio_loop`)."""


def lab_settings(root: Path) -> Path:
    """A JupyterLab settings folder: no news popup, the panel's settings, no token in the
    page config."""
    settings = root / ".lab-settings"
    settings.mkdir(parents=True, exist_ok=True)
    notification = {"fetchNews": "false", "checkForUpdates": False}
    overrides = {
        "@jupyterlab/apputils-extension:notification": notification,
        "jupyter_serve:plugin": PANEL_SETTINGS,
    }
    (settings / "overrides.json").write_text(json.dumps(overrides))
    (settings / "page_config.json").write_text(json.dumps({"token": ""}))
    return settings


def build_archive(
    folder: Path, name: str, version: str, source: str, config: str = "", form: str = "default"
) -> Path:
    """`<folder>/<name>-<version>.mar` with `source` as its handler (`form="no-archive"`:
    the model folder `<folder>/<name>` instead)."""
    src = folder / f".src-{name}-{version}"
    src.mkdir(parents=True, exist_ok=True)
    (src / "handler.py").write_text(source)
    config_file = None
    if config:
        (src / "model-config.yaml").write_text(config)
        config_file = str(src / "model-config.yaml")
    spec = ArchiveSpec(
        model_name=name, version=version, handler=str(src / "handler.py"),
        config_file=config_file, export_path=str(folder), force=True, archive_format=form,
    )  # fmt: skip
    built = build_mar(spec)
    shutil.rmtree(src)
    return built if form == "no-archive" else built.rename(folder / f"{name}-{version}.mar")


class LabServer(ServeProcess):
    """`jupyter lab` serving the demo model, under `BASE_URL`, in `root`."""

    def __init__(self, root: Path, extra: tuple[str, ...] = ()) -> None:
        store = root / "model_store"
        build_demo(store)
        args = [
            f"--ServerApp.base_url={BASE_URL}",
            f"--ServeApp.model_store={store}",
            "--ServeApp.load_models=demo.mar",
            f"--LabApp.app_settings_dir={lab_settings(root)}",
            *extra,
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--allow-root")  # CI and these machines run as root
        # The notebook's kernel must find this server by its runtime file, not by a
        # JUPYTER_SERVE_URL an in-process magics test left in os.environ (magics.py sets it).
        unset = {URL_ENV: "", TOKEN_ENV: ""}
        super().__init__(root, args, command=[*jupyter_command(), "lab"], env=unset)
        self.root = root
        self.store = store
        self.lab_url = f"{self.url.rstrip('/')}{BASE_URL}"

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """SIGTERM by default: on SIGINT, `jupyter lab` (unlike `jupyter serve`) asks whether
        to shut down and, with no answer, goes on serving."""
        return super().stop(signum)

    def serve_client(self) -> Any:
        """httpx for `{base_url}serve/` with the token (the test's own requests)."""
        import httpx

        return httpx.Client(
            base_url=f"{self.lab_url}serve/",
            headers={"Authorization": f"token {TOKEN}"},
            timeout=TIMEOUT / 1000,
        )


def playwright_expect() -> Any:
    """playwright's `expect` with `TIMEOUT` as its guard, for a browser test module (which
    is skipped when playwright is not installed)."""
    expect = pytest.importorskip("playwright.sync_api").expect
    expect.set_options(timeout=TIMEOUT)
    return expect


NEEDS_CHROMIUM = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="needs Debian's chromium (scripts/test)"
)
"""The `pytestmark` of a browser test module."""


@contextmanager
def running_lab(root: Path) -> Iterator[LabServer]:
    """`jupyter lab` over `root` with one worker per startup model; it must stop cleanly."""
    server = LabServer(root)
    try:
        server.start(models=1)
        yield server
        assert server.stop() == 0
    finally:
        server.kill()


@contextmanager
def browser_page() -> Iterator[Any]:
    """A chromium page at the browser tests' window size (1400 x 900)."""
    with chromium() as browser:
        yield browser.new_page(viewport={"width": 1400, "height": 900})


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's chromium through playwright; closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Lab:
    """One JupyterLab page and the steps the tests share."""

    def __init__(self, page: Any, server: ServeProcess) -> None:
        self.page = page
        self.server = server
        self.console_errors: list[str] = []
        page.on("console", self._console)
        page.set_default_timeout(TIMEOUT)

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.console_errors.append(message.text)

    def open(self, path: str = "lab", base_url: str = BASE_URL) -> None:
        """Log in through `?token=` (the cookie), then load `path`."""
        self.page.goto(f"{self.server.url.rstrip('/')}{base_url}{path}?token={TOKEN}")
        self.page.locator("#jp-main-dock-panel").wait_for()

    def open_panel(self) -> Any:
        """Show the Serving panel (its tab in the left side bar)."""
        panel = self.page.locator("#jupyter-serve-panel")
        if not panel.is_visible():
            self.page.locator('li[data-id="jupyter-serve-panel"]').click()
        panel.wait_for()
        return panel

    def card(self, name: str, version: str) -> Any:
        return self.page.locator(f'.jp-ServeModel[data-model="{name}"][data-version="{version}"]')

    def dialog(self) -> Any:
        dialog = self.page.locator(".jp-Dialog")
        dialog.wait_for()
        return dialog

    def accept(self, label: str) -> None:
        """Click the dialog's button `label` and wait for that dialog to close (another may
        open at once)."""
        dialog = self.dialog()
        shown = dialog.element_handle()
        dialog.locator(".jp-Dialog-button", has_text=label).click()
        shown.wait_for_element_state("hidden")

    def notification(self, text: str) -> Any:
        """The toast whose text contains `text`, once shown."""
        toast = self.page.locator(".Toastify__toast", has_text=text).first
        toast.wait_for()
        return toast

    def screenshot(self, name: str, target: Any = None) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        (target or self.page).screenshot(path=str(path))
        return path
