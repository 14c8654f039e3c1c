"""The Serving panel in a real browser: Debian's chromium driving a real `jupyter lab`.

One `jupyter lab` (under a non-default base_url, no token in the page: cookie + XSRF
only) serves the demo model; one page goes through what a user does, in order:
see the demo model, watch its figures move with predictions, serve a `.mar` from
the file browser (an archive outside the model store, so it is uploaded first),
scale, set the default version, try a model, follow its log, see an error as a
notification, explain with a heat map, get an SVG answer as a download (its script
never runs), unregister, and run `%serve dashboard` in a notebook of the same
server. Screenshots land in build/screenshots/.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_browser import (  # jp_*: pytest-jupyter's loop fixtures, switched off here
    BASE_URL,
    HEAT_HANDLER,
    NEEDS_CHROMIUM,
    PANEL_SETTINGS,
    PRINTING_HANDLER,
    TIMEOUT,
    Lab,
    LabServer,
    browser_page,
    build_archive,
    jp_asyncio_loop,  # noqa: F401
    jp_server_cleanup,  # noqa: F401
    playwright_expect,
    running_lab,
)
from lab_browser import picture as png
from serve_process import TOKEN

from jupyter_serve.demo import CONFIG

expect = playwright_expect()
PlaywrightError = pytest.importorskip("playwright.sync_api").Error
pytestmark = NEEDS_CHROMIUM
IRIS = "[6.5, 3.0, 5.8, 2.2]"
# An SVG whose script marks the document it runs in and the page that holds it.
SCRIPTED_SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40"><script>'
    b"document.documentElement.setAttribute('data-ran', 'yes');"
    b"try { top.svgRan = true; } catch (e) {}"
    b'</script><rect width="40" height="40" fill="red"/></svg>'
)
# A torch-free handler answering every request with SCRIPTED_SVG as image/svg+xml.
SVG_HANDLER = f"""
SVG = {SCRIPTED_SVG!r}


def handle(data, context):
    if not data:
        return None
    for index in range(len(data)):
        context.set_response_content_type(index, "image/svg+xml")
    return [SVG for _ in data]
"""
NO_FIGURE = "\u2013"  # the panel's dash before a model's first request


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    root = tmp_path_factory.mktemp("lab")
    archives = root / "archives"
    archives.mkdir()
    build_archive(archives, "demo", "2.0", PRINTING_HANDLER, CONFIG)
    build_archive(root / "model_store", "heat", "1.0", HEAT_HANDLER)
    build_archive(root / "model_store", "folded", "1.0", HEAT_HANDLER, form="no-archive")
    build_archive(root / "model_store", "scripted", "1.0", SVG_HANDLER)
    (root / "dashboard.ipynb").write_text(json.dumps(_notebook()))
    with running_lab(root) as lab:
        yield lab


@pytest.fixture(scope="module")
def lab(server: LabServer) -> Iterator[Lab]:
    with browser_page() as page:
        yield Lab(page, server)


def _notebook() -> dict[str, Any]:
    cells = ["%load_ext jupyter_serve", "%serve dashboard"]
    return {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "source": s,
                "outputs": [],
                "execution_count": None,
            }
            for s in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _predict(server: LabServer, count: int, version: str = "") -> None:
    with server.serve_client() as client:
        for _ in range(count):
            path = f"predictions/demo/{version}" if version else "predictions/demo"
            client.post(path, content=IRIS).raise_for_status()


def test_the_labextension_is_installed_with_the_package() -> None:
    jupyter = Path(sys.executable).parent / "jupyter"
    listed = subprocess.run(
        [str(jupyter), "labextension", "list"], capture_output=True, text=True, check=True
    )
    output = listed.stdout + listed.stderr
    assert re.search(r"jupyter_serve v\S+ .*enabled.*OK.*\(python, jupyter_serve\)", output)


def test_lab_loads_the_panel_listing_the_demo_model(lab: Lab) -> None:
    lab.open()
    config = lab.page.evaluate("document.getElementById('jupyter-config-data').textContent")
    assert TOKEN not in config  # the extension authenticates with the cookie alone
    panel = lab.open_panel()
    demo = lab.card("demo", "1.0")
    expect(demo).to_have_attribute("data-status", "healthy", timeout=TIMEOUT)
    expect(demo.locator(".jp-ServeModel-workers")).to_have_attribute("data-ready", "1")
    expect(demo.locator(".jp-ServeModel-workers")).to_contain_text("(cpu)")
    expect(demo).to_have_attribute("data-default", "true")
    expect(panel.locator(".jp-ServePanel-totals")).to_contain_text("1 model")
    expect(lab.page.locator(".jp-ServeStatus")).to_contain_text("Serving: 1 model")
    assert lab.console_errors == []


def test_figures_move_with_predictions_without_a_re_render(lab: Lab, server: LabServer) -> None:
    demo = lab.card("demo", "1.0")
    demo.evaluate("node => { node.dataset.probe = 'kept' }")
    expect(demo.locator('[data-figure="p50"]')).to_have_text(NO_FIGURE)
    with lab.page.expect_request(re.compile(re.escape(f"{BASE_URL}serve/summary"))) as seen:
        _predict(server, 20)
    request = seen.value
    assert "x-xsrftoken" in request.headers  # ServerConnection: cookie + XSRF
    assert TOKEN not in request.url
    assert TOKEN not in json.dumps(request.headers)
    expect(demo.locator('[data-figure="p50"]')).to_have_text(re.compile(r"\d+(\.\d)? ms"))
    expect(demo.locator('[data-figure="rps"]')).not_to_have_text("0")
    expect(demo.locator('[data-figure="fill"]')).to_have_text(re.compile(r"\d+%"))
    expect(lab.page.locator(".jp-ServeStatus")).not_to_contain_text("· 0 req/s")
    points = demo.locator(".jp-ServeModel-throughputLine")
    expect(points).to_have_attribute("points", re.compile(r"\d+\.\d,\d+\.\d \d"))
    assert demo.get_attribute("data-probe") == "kept"  # the same node, updated in place


def test_refresh_pauses_and_resumes(lab: Lab) -> None:
    pause = lab.page.locator(".jp-ServePanel-pause")
    pause.click()
    expect(pause).to_have_text("Resume")
    expect(lab.page.locator("#jupyter-serve-panel")).to_have_class(re.compile("jp-mod-paused"))
    with lab.page.expect_request(re.compile(r"serve/summary")):
        pause.click()  # resuming refreshes at once
    expect(pause).to_have_text("Pause")


def test_serve_a_mar_from_the_file_browser(lab: Lab) -> None:
    lab.page.locator('li[data-id="filebrowser"]').click()
    listing = lab.page.locator(".jp-DirListing-content")
    listing.locator('.jp-DirListing-item[data-isdir="true"]', has_text="archives").dblclick()
    archive = listing.locator('.jp-DirListing-item[data-file-type="jupyter-serve-mar"]')
    archive.click(button="right")
    lab.page.locator(".lm-Menu-item", has_text="Serve this model").click()
    form = lab.dialog()
    batch_size = form.locator('input[name="batch_size"]')
    expect(batch_size).to_have_value(str(PANEL_SETTINGS["defaultBatchSize"]))  # the settings
    expect(form.locator('input[name="initial_workers"]')).to_have_value("1")
    batch_size.fill("4")
    lab.accept("Serve")
    lab.notification("demo/2.0: 1/1 workers ready")
    lab.page.locator(".jp-ServeStatus").click()  # the status-bar item opens the panel
    served = lab.card("demo", "2.0")
    expect(served).to_be_visible()
    expect(served).to_have_attribute("data-status", "healthy")
    expect(served).to_have_attribute("data-default", "false")
    assert (lab.server.store / "demo-2.0.mar").exists()  # uploaded: archives/ is not served


def test_serve_a_model_folder_of_the_store_by_its_path(lab: Lab) -> None:
    lab.page.locator('li[data-id="filebrowser"]').click()
    listing = lab.page.locator(".jp-DirListing-content")
    lab.page.locator(".jp-BreadCrumbs-home").click()
    listing.locator('.jp-DirListing-item[data-isdir="true"]', has_text="model_store").dblclick()
    folder = listing.locator('.jp-DirListing-item[data-isdir="true"]', has_text="folded")
    folder.click(button="right")
    lab.page.locator(".lm-Menu-item", has_text="Serve this model").click()
    lab.accept("Serve")
    lab.notification("Serving folded/1.0: 1/1 workers ready")
    lab.open_panel()
    expect(lab.card("folded", "1.0")).to_have_attribute("data-status", "healthy")
    with lab.server.serve_client() as client:  # registered in place, not uploaded
        assert client.get("models/folded").json()[0]["modelUrl"].endswith("model_store/folded")


def test_scale_to_two_workers(lab: Lab) -> None:
    demo = lab.card("demo", "1.0")
    demo.locator(".jp-ServeModel-scale").click()
    lab.dialog().locator("input").fill("2")
    lab.accept("Ok")
    workers = demo.locator(".jp-ServeModel-workers")
    expect(workers).to_have_attribute("data-ready", "2")
    expect(workers).to_contain_text("2 ready · 0 starting · 0 failed")
    lab.notification("Scaling demo/1.0 to 2: 2/2 workers ready")
    lab.screenshot("serving-panel", lab.page.locator("#jupyter-serve-panel"))


def test_set_the_default_version(lab: Lab, server: LabServer) -> None:
    lab.card("demo", "2.0").locator(".jp-ServeModel-set-default").click()
    lab.notification('Default version successfully updated for model "demo" to "2.0"')
    expect(lab.card("demo", "2.0")).to_have_attribute("data-default", "true")
    expect(lab.card("demo", "1.0")).to_have_attribute("data-default", "false")
    with server.serve_client() as client:
        assert client.get("models/demo").json()[0]["modelVersion"] == "2.0"


def test_try_it_and_follow_the_log(lab: Lab, server: LabServer) -> None:
    lab.card("demo", "2.0").locator(".jp-ServeModel-log").click()
    log = lab.page.locator(".jp-ServeLog-lines")
    expect(log.locator(".jp-ServeLog-line").first).to_be_visible()
    handled = log.locator(".jp-ServeLog-line", has_text="handled 1 request(s)")
    expect(handled).to_have_count(0)

    lab.card("demo", "2.0").locator(".jp-ServeModel-try").click()
    tab = lab.page.locator(".jp-ServeTry:visible")
    tab.locator("textarea").fill(IRIS)
    tab.locator(".jp-ServeTry-send").click()
    expect(tab.locator(".jp-ServeTry-status")).to_have_attribute("data-status", "200")
    answer = json.loads(tab.locator(".jp-ServeTry-answer").inner_text())
    assert max(answer, key=answer.get) == "virginica"
    curl = tab.locator(".jp-ServeTry-curl").inner_text()
    assert f"{BASE_URL}serve/predictions/demo/2.0" in curl
    assert "$JUPYTER_TOKEN" in curl
    assert TOKEN not in curl
    tab.locator(".jp-ServeTry-copy").click()
    lab.notification("Copied the curl command")
    lab.screenshot("try-it", tab)
    lab.screenshot("jupyterlab")  # the panel beside the Try-it tab (README's picture)

    lab.page.locator(".lm-TabBar-tab", has_text="Log: demo 2.0").click()
    expect(handled).to_have_count(1)  # the tab followed the worker's new line


def test_a_failure_is_a_notification_with_torchserve_message(lab: Lab, server: LabServer) -> None:
    missing = "/nowhere/missing.mar"  # a path: the server checks it (a store name is checked
    with server.serve_client() as client:  # first: test_labextension_first_hour.py)
        refused = client.post("models", params={"url": missing})
    assert refused.status_code == 404
    message = refused.json()["message"]  # TorchServe's words, whatever they are
    lab.page.locator(".jp-ServePanel-register").click()
    lab.dialog().locator("input").fill(missing)
    lab.accept("Ok")
    lab.accept("Serve")
    lab.notification(f"Registering {missing} failed: {message}")


def test_an_image_answer_and_an_explanation_heat_map(
    lab: Lab, server: LabServer, tmp_path: Path
) -> None:
    with server.serve_client() as client:
        params = {"url": "heat-1.0.mar", "initial_workers": 1, "synchronous": "true"}
        client.post("models", params=params).raise_for_status()
    picture = tmp_path / "input.png"
    picture.write_bytes(png((4, 4), "white"))  # the input under the heat map
    card = lab.card("heat", "1.0")
    expect(card).to_have_attribute("data-status", "healthy")
    card.locator(".jp-ServeModel-try").click()
    tab = lab.page.locator(".jp-ServeTry:visible")
    tab.locator('input[value="text"]').check()
    tab.locator("textarea").fill("picture")
    tab.locator(".jp-ServeTry-send").click()
    image = tab.locator(".jp-ServeTry-image")
    expect(image).to_be_visible()  # an image answer is shown as the image
    assert image.evaluate("img => [img.naturalWidth, img.naturalHeight]") == [3, 2]
    assert "image/png" in tab.locator(".jp-ServeTry-status").inner_text()

    tab.locator(".jp-ServeTry-route").select_option("explanations")
    tab.locator('input[value="file"]').check()
    tab.locator('input[type="file"]').set_input_files(str(picture))
    tab.locator(".jp-ServeTry-send").click()
    heatmap = tab.locator(".jp-ServeTry-heatmap")
    expect(heatmap).to_be_visible()
    # The cell (1, 1) attributes +2: red over the picture; (1, 2) -2: blue.
    red, _, blue = heatmap.evaluate(_PIXEL, [1, 1])
    assert red > blue
    red, _, blue = heatmap.evaluate(_PIXEL, [2, 1])
    assert blue > red
    assert "image/png" in tab.locator(".jp-ServeTry-curl").inner_text()


_PIXEL = """(canvas, [x, y]) => {
  const cell = canvas.width / 4;
  const data = canvas.getContext('2d').getImageData((x + 0.5) * cell, (y + 0.5) * cell, 1, 1);
  return Array.from(data.data.slice(0, 3));
}"""


def test_an_svg_answer_is_a_download_whose_script_never_runs(lab: Lab, server: LabServer) -> None:
    """Only raster answers are shown inline (labextension/src/answer.ts): an SVG is a
    download link to a blob typed application/octet-stream, and no blob: URL the tab
    holds runs the SVG's script when opened in a tab of its own."""
    with server.serve_client() as client:
        params = {"url": "scripted-1.0.mar", "initial_workers": 1, "synchronous": "true"}
        client.post("models", params=params).raise_for_status()
    card = lab.card("scripted", "1.0")
    expect(card).to_have_attribute("data-status", "healthy")
    card.locator(".jp-ServeModel-try").click()
    tab = lab.page.locator(".jp-ServeTry:visible")
    tab.locator("textarea").fill("{}")
    tab.locator(".jp-ServeTry-send").click()
    expect(tab.locator(".jp-ServeTry-status")).to_contain_text("200")
    assert "image/svg+xml" in tab.locator(".jp-ServeTry-status").inner_text()
    expect(tab.locator(".jp-ServeTry-image")).to_be_hidden()
    link = tab.locator(".jp-ServeTry-download")
    expect(link).to_be_visible()
    assert link.get_attribute("download") == "answer.svg"
    expect(tab.locator(".jp-ServeTry-answer")).to_contain_text("not shown here")
    lab.screenshot("try-it-svg", tab)
    blobs = tab.evaluate(_BLOB_URLS)
    assert blobs == [link.get_attribute("href")]
    assert lab.page.evaluate(_BLOB_TYPE, blobs[0]) == "application/octet-stream"
    # The check sees a script run: the same SVG as an image/svg+xml blob does run.
    control = lab.page.evaluate(_SVG_BLOB, SCRIPTED_SVG.decode())
    assert _ran_when_opened(lab, control) == "yes"
    assert [_ran_when_opened(lab, url) for url in blobs] == [None]
    assert lab.page.evaluate("() => window.svgRan") is None


_BLOB_URLS = """tab => Array.from(tab.querySelectorAll('[src^="blob:"], [href^="blob:"]'),
  node => node.getAttribute('src') || node.getAttribute('href'))"""
_BLOB_TYPE = "url => fetch(url).then(answer => answer.blob()).then(blob => blob.type)"
_SVG_BLOB = "svg => URL.createObjectURL(new Blob([svg], { type: 'image/svg+xml' }))"


def _ran_when_opened(lab: Lab, url: str) -> str | None:
    """What the SVG script marked in a tab the page opens on `url` (None: it did not run,
    the tab only downloaded)."""
    with lab.page.expect_popup() as popup:
        lab.page.evaluate("url => { window.open(url); }", url)
    opened = popup.value
    try:
        opened.wait_for_load_state()
        ran: str | None = opened.evaluate("() => document.documentElement.getAttribute('data-ran')")
        return ran
    except PlaywrightError:  # closed after its download: nothing was rendered
        return None
    finally:
        opened.close()


def test_unregister_asks_first(lab: Lab) -> None:
    demo = lab.card("demo", "1.0")
    demo.locator(".jp-ServeModel-unregister").click()
    lab.accept("Cancel")
    expect(demo).to_be_visible()
    demo.locator(".jp-ServeModel-unregister").click()
    lab.accept("Unregister")
    lab.notification('Model "demo" unregistered')
    expect(demo).to_have_count(0)
    expect(lab.card("demo", "2.0")).to_be_visible()


def wait_for_the_kernel(lab: Lab) -> None:
    """Until the open notebook's kernel is idle (choosing it when asked)."""
    idle = lab.page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
    asked = lab.page.locator(".jp-Dialog", has_text="Select Kernel")
    expect(idle.or_(asked).first).to_be_visible()
    if asked.is_visible():  # JupyterLab asks when the kernel specs came after the notebook
        lab.accept("Select")
    expect(idle).to_be_visible()


def test_the_dashboard_widget_renders_in_a_notebook(lab: Lab) -> None:
    lab.page.goto(f"{lab.server.lab_url}lab/tree/dashboard.ipynb")
    wait_for_the_kernel(lab)
    lab.page.locator(".jp-Notebook .jp-Cell").first.click()  # the notebook is the current widget
    lab.page.locator(".lm-MenuBar-item", has_text="Run").click()
    run_all = lab.page.locator('.lm-Menu-item[data-command="runmenu:run-all"]')
    expect(run_all).not_to_have_class(re.compile("lm-mod-disabled"))
    run_all.click()
    expect(lab.page.locator(".jp-InputPrompt", has_text="[2]:")).to_be_visible()
    widget = lab.page.locator(".jp-OutputArea-output .widget-button", has_text="Scale")
    expect(widget.first).to_be_visible()
    expect(lab.page.locator(".jp-OutputArea-output")).to_contain_text("demo version")
    lab.screenshot("dashboard", lab.page.locator(".jp-NotebookPanel:visible"))


def test_the_panel_opens_in_notebook_7_from_the_palette(lab: Lab) -> None:
    lab.page.goto(f"{lab.server.lab_url}notebooks/dashboard.ipynb?token={TOKEN}")  # logged in
    lab.page.locator(".jp-Notebook").wait_for()
    wait_for_the_kernel(lab)  # its start moves the focus to a cell, closing an open palette
    lab.page.locator(".lm-MenuBar-item", has_text="View").click()  # there once the app runs
    lab.page.locator('.lm-Menu-item[data-command="apputils:activate-command-palette"]').click()
    lab.page.locator(".lm-CommandPalette-input").fill("Open the Serving Panel")
    item = lab.page.locator('.lm-CommandPalette-item[data-command="jupyter-serve:open-panel"]')
    expect(item).to_have_class(re.compile("lm-mod-active"))
    lab.page.keyboard.press("Enter")
    served = lab.page.locator('.jp-ServeModel[data-model="demo"][data-status="healthy"]')
    expect(served.first).to_be_visible()
    lab.screenshot("notebook7-panel")
