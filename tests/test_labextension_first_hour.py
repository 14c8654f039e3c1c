"""The Serving panel through a new user's first hour (issue 23), in a real browser.

One `jupyter lab` (lab_browser.py: non-default base_url, cookie + XSRF only) serves
the demo model; its store also holds `mnist-1.0.mar`, whose explanations are a
28 x 28 attribution map, and `broken-1.0.mar`, whose handler cannot be imported.
In order: the panel at JupyterLab's default sidebar width and wider, Try-it's
explanation (heat map first, raw JSON collapsed) and its failures (the handler's
exception as the cause), a mistyped name (checked before the form; "did you
mean"), a model whose workers cannot start (nothing left registered, one worker
started, the cause on a failed card), and "Serve this model"'s form and its
"Replace the archive?" question. Screenshots land in build/screenshots/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from lab_browser import (  # jp_*: pytest-jupyter's loop fixtures, switched off here
    NEEDS_CHROMIUM,
    Lab,
    LabServer,
    browser_page,
    build_archive,
    jp_asyncio_loop,  # noqa: F401
    jp_server_cleanup,  # noqa: F401
    playwright_expect,
    running_lab,
)

expect = playwright_expect()
pytestmark = NEEDS_CHROMIUM
IRIS = "[6.5, 3.0, 5.8, 2.2]"
# A torch-free MNIST-like model: its explanation of a 28 x 28 input is a 28 x 28 map.
MNIST_HANDLER = """
def handle(data, context):
    if not data:
        return None
    side = 28
    grid = [[(x - y) / side for x in range(side)] for y in range(side)]
    return [grid if context.get_request_header(i, "explain") == "True" else {"digit": 7}
            for i in range(len(data))]
"""
STATEFUL_HANDLER = """
def handle(data, context):
    return None if data is None else [context.get_sequence_id(i) for i in range(len(data))]
"""
STATEFUL_CONFIG = (
    "continuousBatching: true\nsequenceBatching: true\nsequenceMaxIdleMSec: 600000\n"
    "maxNumSequence: 4\n"
)
BROKEN_HANDLER = "import missing_module_xyz\n\n\ndef handle(data, context):\n    return data\n"
MISSING = "ModuleNotFoundError: No module named 'missing_module_xyz'"
ONE_LINE = """dd => { const range = document.createRange(); range.selectNodeContents(dd);
  return range.getClientRects().length; }"""
# The placeholder's width in the input's font, and the room the input gives it.
PLACEHOLDER_FIT = """input => { const style = getComputedStyle(input);
  const context = document.createElement('canvas').getContext('2d');
  context.font = style.font;
  const room = input.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return [context.measureText(input.placeholder).width, room]; }"""

# The split handle at the right edge of the left side bar (the one to drag to widen it).
SIDEBAR_EDGE = """() => {
  const right = document.getElementById('jp-left-stack').getBoundingClientRect().right;
  const handles = [...document.querySelectorAll('.lm-SplitPanel-handle')]
    .map(h => h.getBoundingClientRect())
    .filter(box => box.width > 0 && Math.abs(box.left - right) < 4);
  return { x: handles[0].left, y: handles[0].top }; }"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    root = tmp_path_factory.mktemp("lab")
    build_archive(root / "model_store", "mnist", "1.0", MNIST_HANDLER)
    build_archive(root / "model_store", "broken", "1.0", BROKEN_HANDLER)
    build_archive(root / "model_store", "chat", "1.0", STATEFUL_HANDLER, STATEFUL_CONFIG)
    (root / "archives").mkdir()
    build_archive(root / "archives", "mnist", "1.0", MNIST_HANDLER + "\n# another build\n")
    with running_lab(root) as lab:
        yield lab


@pytest.fixture(scope="module")
def lab(server: LabServer) -> Iterator[Lab]:
    with browser_page() as page:
        lab = Lab(page, server)
        lab.open()
        yield lab


def _box(locator: Any) -> dict[str, float]:
    box: dict[str, float] = locator.bounding_box()
    return box


def _register(server: LabServer, url: str, **params: Any) -> None:
    with server.serve_client() as client:
        query = {"url": url, "initial_workers": 1, "synchronous": "true", **params}
        client.post("models", params=query).raise_for_status()


def _try_tab(lab: Lab, name: str, version: str) -> Any:
    lab.open_panel()
    lab.card(name, version).locator(".jp-ServeModel-try").click()
    return lab.page.locator(".jp-ServeTry:visible")


def test_the_panel_fits_the_default_sidebar_width(lab: Lab, server: LabServer) -> None:
    panel = lab.open_panel()
    demo = lab.card("demo", "1.0")
    expect(demo).to_have_attribute("data-status", "healthy")
    with server.serve_client() as client:
        for _ in range(10):
            client.post("predictions/demo", content=IRIS).raise_for_status()
    expect(demo.locator('[data-figure="p50"]')).to_have_text(re.compile(r"\d+(\.\d)? ms"))
    for figure in demo.locator(".jp-ServeModel-figure").all():
        assert figure.evaluate(ONE_LINE) == 1, figure.inner_text()  # "8.2 ms", never "8.2 / ms"
    spark = demo.locator(".jp-ServeModel-sparkline")
    assert _box(spark)["width"] >= 0.9 * _box(demo)["width"] - 16
    expect(demo.locator(".jp-ServeModel-legendRps")).to_have_text(re.compile(r"req/s, peak \d"))
    expect(demo.locator(".jp-ServeModel-legendP50")).to_have_text(re.compile(r"p50, peak \d"))
    expect(spark.locator("title")).to_have_text(re.compile(r"now: .* req/s, p50 "))
    memory = demo.locator(".jp-ServeModel-memory")  # each worker's own share, as the widget
    expect(memory).to_have_text(re.compile(r"^memory: \d+ MiB own$"))
    expect(memory).to_have_attribute("title", re.compile(r"what one more worker costs \(PSS\)"))
    lab.page.locator(".jp-ServePanel-pause").click()
    expect(lab.page.locator(".jp-ServePanel-pause")).to_have_text("Resume")
    register = _box(lab.page.locator(".jp-ServePanel-register"))
    assert register["x"] + register["width"] <= _box(panel)["x"] + _box(panel)["width"]
    lab.screenshot("panel-default-width", panel)
    lab.page.locator(".jp-ServePanel-pause").click()
    narrow = _box(spark)["height"]

    start = lab.page.evaluate(SIDEBAR_EDGE)
    lab.page.mouse.move(start["x"] + 1, start["y"] + 200)
    lab.page.mouse.down()
    lab.page.mouse.move(start["x"] + 300, start["y"] + 200, steps=5)
    lab.page.mouse.up()
    tops = {round(_box(f)["y"]) for f in demo.locator(".jp-ServeModel-figure").all()}
    assert len(tops) == 1  # wider: every figure on one row
    assert _box(spark)["height"] > narrow  # and a taller history
    lab.screenshot("panel-wide", panel)
    lab.page.mouse.move(start["x"] + 300, start["y"] + 200)
    lab.page.mouse.down()
    lab.page.mouse.move(start["x"] + 1, start["y"] + 200, steps=5)
    lab.page.mouse.up()


def test_a_stateful_model_shows_its_sequences_and_steps_on_one_line(
    lab: Lab, server: LabServer
) -> None:
    """A sequence-batching, continuously batched model: its card says how many sequences
    are open (of maxNumSequence) and its steps per second, on one line at the default
    sidebar width; a plain model's card has no such line."""
    _register(server, "chat-1.0.mar")
    with server.serve_client() as client:
        client.post("predictions/chat", content=b"hi").raise_for_status()
    lab.open_panel()
    card = lab.card("chat", "1.0")
    stateful = card.locator(".jp-ServeModel-stateful")
    expect(stateful).to_have_text(re.compile(r"^1/4 sequence open · \d+(\.\d+)? steps/s$"))
    assert stateful.evaluate(ONE_LINE) == 1, stateful.inner_text()
    expect(lab.card("demo", "1.0").locator(".jp-ServeModel-stateful")).to_be_hidden()
    lab.screenshot("stateful-card", card)


def test_an_explanation_shows_the_heat_map_first(lab: Lab, server: LabServer) -> None:
    _register(server, "mnist-1.0.mar")
    tab = _try_tab(lab, "mnist", "1.0")
    tab.locator(".jp-ServeTry-route").select_option("explanations")
    digit = [[0.0] * 28 for _ in range(28)]
    tab.locator("textarea").fill(json.dumps(digit))
    tab.locator(".jp-ServeTry-send").click()
    heatmap = tab.locator(".jp-ServeTry-heatmap")
    expect(heatmap).to_be_visible()
    raw = tab.locator(".jp-ServeTry-raw")
    assert raw.evaluate("details => details.open") is False  # the JSON collapsed
    assert _box(heatmap)["y"] < _box(raw)["y"]  # the map first
    answer = tab.locator(".jp-ServeTry-answer").text_content() or ""
    assert len(answer.splitlines()) == 30  # a row per line, not a number per line
    assert json.loads(answer)[0][0] == 0.0
    tab.locator(".jp-ServeTry-copyAnswer").click()
    lab.notification("Copied the answer")
    assert raw.evaluate("details => details.open") is False  # copying does not unfold it
    lab.screenshot("try-it-explanation", tab)


def test_a_failed_prediction_says_why_until_the_next_one_works(lab: Lab) -> None:
    tab = _try_tab(lab, "demo", "1.0")
    body = tab.locator("textarea")
    hint = body.get_attribute("placeholder") or ""
    with pytest.raises(json.JSONDecodeError):
        json.loads(hint)  # a hint, not a body
    assert body.evaluate("box => getComputedStyle(box, '::placeholder').fontStyle") == "italic"
    lab.screenshot("try-it-hint", tab)
    tab.locator(".jp-ServeTry-send").click()  # an empty body
    expect(tab.locator(".jp-ServeTry-status")).to_have_attribute("data-status", "503")
    cause = re.compile(r"Prediction failed \(cause: \w+Error: .+\)")
    expect(tab.locator(".jp-ServeTry-error")).to_have_text(cause)
    toast = lab.notification("demo: Prediction failed (cause: ")
    expect(toast).to_contain_text(cause)
    lab.screenshot("try-it-error", lab.page.locator("#jp-main-dock-panel"))
    body.fill("[1, 2]")  # a wrong input shape
    tab.locator(".jp-ServeTry-send").click()
    expect(tab.locator(".jp-ServeTry-error")).to_contain_text("RuntimeError: ")
    body.fill(IRIS)
    tab.locator(".jp-ServeTry-send").click()
    expect(tab.locator(".jp-ServeTry-status")).to_have_attribute("data-status", "200")
    failed = lab.page.locator(".Toastify__toast", has_text="Prediction failed")
    expect(failed).to_have_count(0)
    expect(tab.locator(".jp-ServeTry-error")).to_be_hidden()


def test_a_mistyped_name_is_caught_before_the_form(lab: Lab, server: LabServer) -> None:
    lab.open_panel()
    lab.page.locator(".jp-ServePanel-register").click()
    lab.dialog().locator("input").fill("mnist-1.0.mr")
    lab.accept("Ok")
    toast = lab.notification("Registering mnist-1.0.mr failed")
    expect(toast).to_contain_text("no mnist-1.0.mr; did you mean mnist-1.0.mar?")
    expect(lab.page.locator(".jp-Dialog")).to_have_count(0)  # no "Serve this model" form
    tab = _try_tab(lab, "mnist", "1.0")
    with server.serve_client() as client:  # the version goes, a similar name comes
        client.delete("models/mnist/1.0").raise_for_status()
    _register(server, "mnist-1.0.mar", model_name="mnists")
    tab.locator(".jp-ServeTry-route").select_option("predictions")
    tab.locator(".jp-ServeTry-send").click()
    expect(tab.locator(".jp-ServeTry-status")).to_have_attribute("data-status", "404")
    suggested = "Model not found: mnist; did you mean mnists/1.0?"
    expect(tab.locator(".jp-ServeTry-error")).to_contain_text(suggested)
    lab.screenshot("try-it-did-you-mean", tab)


def test_workers_that_cannot_start_leave_nothing_behind(lab: Lab, server: LabServer) -> None:
    lab.open_panel()
    lab.page.locator(".jp-ServePanel-register").click()
    lab.dialog().locator("input").fill("broken-1.0.mar")
    lab.accept("Ok")
    expect(lab.dialog().locator('input[name="initial_workers"]')).to_have_value("1")
    lab.accept("Serve")
    toast = lab.notification("Registering broken-1.0.mar failed")
    expect(toast).to_contain_text("Failed to start workers for model broken version: 1.0")
    expect(toast).to_contain_text("(cause: ModuleNotFoundError")  # JupyterLab cuts a toast
    toast.locator("button", has_text="Details").click()
    expect(lab.dialog()).to_contain_text(f"(cause: {MISSING})")  # the whole message
    lab.accept("")  # its one button
    expect(lab.page.locator(".Toastify__toast", has_text="starting workers")).to_have_count(0)
    expect(lab.card("broken", "1.0")).to_have_count(0)
    lab.screenshot("register-failed", lab.page)
    with server.serve_client() as client:
        assert client.get("models/broken").status_code == 404  # nothing left registered
    starts = [line for line in server.lines if re.search(r"\[broken/\d+\] Worker \w+, pid", line)]
    assert len(starts) == 1, starts  # one worker asked, one started

    _register(server, "broken-1.0.mar", synchronous="false")  # REST, not waiting: it stays
    card = lab.card("broken", "1.0")
    expect(card).to_have_attribute("data-status", "failed")
    expect(card.locator(".jp-ServeModel-cause")).to_have_text(f"cause: {MISSING}")
    lab.screenshot("failed-card", card)
    with server.serve_client() as client:
        client.delete("models/broken/1.0").raise_for_status()


def test_the_serve_form_and_the_replace_question(lab: Lab) -> None:
    lab.page.locator('li[data-id="filebrowser"]').click()
    listing = lab.page.locator(".jp-DirListing-content")
    listing.locator('.jp-DirListing-item[data-isdir="true"]', has_text="archives").dblclick()
    listing.locator('.jp-DirListing-item[data-file-type="jupyter-serve-mar"]').click(button="right")
    lab.page.locator(".lm-Menu-item", has_text="Serve this model").click()
    form = lab.dialog()
    text, room = form.locator('input[name="model_name"]').evaluate(PLACEHOLDER_FIT)
    assert text <= room  # the placeholder is not cut off
    lab.screenshot("serve-form", form)
    lab.accept("Serve")
    question = lab.dialog()
    expect(question).to_contain_text("Replace the archive?")
    expect(question).to_contain_text("Registered from it: mnists/1.0.")
    lab.screenshot("replace-question", question)
    lab.accept("Cancel")
    for progress in ("starting workers", "Uploading"):  # no spinner left behind
        expect(lab.page.locator(".Toastify__toast", has_text=progress)).to_have_count(0)
