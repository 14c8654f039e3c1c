"""The explanation viewer headless: PNG pixels, token colours, bar count and order."""

from __future__ import annotations

import io
import json
import re

import ipywidgets
import pytest
from PIL import Image

from jupyter_serve.kernel.widgets.explanations import (
    image_png,
    show_explanation,
    tabular_html,
    text_html,
    to_map,
)
from jupyter_serve.kernel.widgets.plots import NEGATIVE, POSITIVE, sparkline_svg


def grid(height: int, width: int, peaks: dict[tuple[int, int], float]) -> list[list[float]]:
    return [[peaks.get((y, x), 0.0) for x in range(width)] for y in range(height)]


def decode(png: bytes) -> Image.Image:
    picture = Image.open(io.BytesIO(png))
    assert picture.format == "PNG"
    return picture.convert("RGB")


def test_image_heatmap_is_red_at_the_positive_peak_and_blue_at_the_negative_one() -> None:
    attributions = grid(8, 8, {(1, 6): 2.0, (6, 2): -1.0})
    picture = decode(image_png(attributions))
    factor = picture.width // 8
    assert picture.size == (8 * factor, 8 * factor)  # small maps are enlarged to be seen
    red = picture.getpixel((6 * factor + factor // 2, 1 * factor + factor // 2))
    blue = picture.getpixel((2 * factor + factor // 2, 6 * factor + factor // 2))
    blank = picture.getpixel((factor // 2, factor // 2))
    assert red[0] > red[1] + 80
    assert abs(red[1] - red[2]) < 10
    assert blue[2] > blue[0] + 40
    assert blank == (255, 255, 255)
    reddest = max(
        ((x, y) for x in range(picture.width) for y in range(picture.height)),
        key=lambda xy: picture.getpixel(xy)[0] - picture.getpixel(xy)[1],
    )
    assert (reddest[0] // factor, reddest[1] // factor) == (6, 1)


def test_channels_are_summed_and_a_batch_of_one_is_dropped() -> None:
    channels = [grid(2, 3, {(0, 1): 1.0}), grid(2, 3, {(0, 1): 2.0, (1, 0): -1.0}), grid(2, 3, {})]
    assert to_map([channels]) == [[0.0, 3.0, 0.0], [-1.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="2 or 3 dimensions"):
        to_map([1.0, 2.0])


def test_the_heatmap_lies_over_the_input_image_at_its_size() -> None:
    under = Image.new("RGB", (40, 20), (0, 255, 0))
    buffer = io.BytesIO()
    under.save(buffer, format="PNG")
    attributions = [grid(2, 4, {(0, 3): 1.0})]  # [C=1][H][W]
    for image in (under, buffer.getvalue()):
        picture = decode(image_png(attributions, image))
        assert picture.size == (40, 20)
        hot, cold = picture.getpixel((35, 5)), picture.getpixel((5, 15))
        assert cold == (0, 255, 0)  # no attribution: the image shows through
        assert hot[0] > 100  # blended with red
        assert hot[1] < 255


def test_show_explanation_picks_an_image_widget_for_a_map() -> None:
    widget = show_explanation(json.dumps([grid(4, 4, {(2, 2): 1.0})]).encode())
    assert isinstance(widget, ipywidgets.Image)
    assert widget.format == "png"
    assert decode(widget.value).size[0] >= 4


def spans(markup: str) -> list[tuple[str, str, str]]:
    """(class, background, text) of each token span."""
    found = re.findall(
        r'<span class="token (\w+)"[^>]*background-color:(rgba\([^)]*\))[^>]*>([^<]*)</span>',
        markup,
    )
    return [(kind, colour, text) for kind, colour, text in found]


def test_text_tokens_are_coloured_by_sign_with_opacity_by_magnitude() -> None:
    tokens = spans(text_html(["good", "bad", "<the>"], [0.8, -0.4, 0.0]))
    assert [text for _, _, text in tokens] == ["good", "bad", "&lt;the&gt;"]
    assert [kind for kind, _, _ in tokens] == ["positive", "negative", "positive"]
    red, blue = "rgba({},{},{},".format(*POSITIVE), "rgba({},{},{},".format(*NEGATIVE)
    assert tokens[0][1] == red + "1.000)"
    assert tokens[1][1] == blue + "0.500)"
    assert tokens[2][1].endswith(",0.000)")


def test_torchserve_text_explanations_are_shown_as_tokens() -> None:
    answer = {"words": ["a", "fine", "film"], "importances": [0.1, 0.9, -0.2], "delta": 0.01}
    widget = show_explanation(answer)
    assert isinstance(widget, ipywidgets.HTML)
    assert [text for _, _, text in spans(widget.value)] == ["a", "fine", "film"]
    flat = show_explanation([0.5, -0.5], tokens=["yes", "no"])
    assert [kind for kind, _, _ in spans(flat.value)] == ["positive", "negative"]
    with pytest.raises(ValueError, match="2 tokens but 3 attributions"):
        show_explanation([1.0, 2.0, 3.0], kind="text", tokens=["a", "b"])


def bars(markup: str) -> list[tuple[str, float, str]]:
    """(label, value, fill) of each bar, top to bottom."""
    found = re.findall(
        r'<g class="bar" data-label="([^"]*)" data-value="([^"]*)">.*?fill="([^"]*)"', markup
    )
    return [(label, float(value), fill) for label, value, fill in found]


def test_tabular_bars_come_largest_magnitude_first_coloured_by_sign() -> None:
    drawn = bars(tabular_html([0.1, -0.7, 0.3], ["age", "income", "height"]))
    assert [(label, value) for label, value, _ in drawn] == [
        ("income", -0.7),
        ("height", 0.3),
        ("age", 0.1),
    ]
    assert drawn[0][2] == "rgb({},{},{})".format(*NEGATIVE)
    assert drawn[1][2] == "rgb({},{},{})".format(*POSITIVE)
    assert len(bars(tabular_html([1.0, 2.0, 3.0], ["a", "b", "c"], top=2))) == 2


def test_tabular_bar_lengths_follow_magnitude() -> None:
    markup = tabular_html([1.0, 0.5], ["a", "b"])
    widths = [float(w) for w in re.findall(r'<rect [^>]*width="([\d.]+)"', markup)]
    assert widths[0] == pytest.approx(2 * widths[1])


def test_show_explanation_tabular_from_a_list_or_a_mapping() -> None:
    widget = show_explanation([[0.2, -0.4]], feature_names=["x", "y"])  # a batch of one
    assert isinstance(widget, ipywidgets.HTML)
    assert [label for label, _, _ in bars(widget.value)] == ["y", "x"]
    named = show_explanation({"petal": 0.9, "sepal": 0.1})
    assert [label for label, _, _ in bars(named.value)] == ["petal", "sepal"]
    unnamed = show_explanation([0.1, 0.3, 0.2])
    assert [label for label, _, _ in bars(unnamed.value)] == ["feature 1", "feature 2", "feature 0"]
    with pytest.raises(ValueError, match="1 feature names but 2"):
        show_explanation([0.1, 0.2], kind="tabular", feature_names=["x"])


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown explanation kind"):
        show_explanation([1.0], kind="audio")  # type: ignore[arg-type]


def test_sparkline_scales_points_into_the_box() -> None:
    svg = sparkline_svg([0.0, 5.0, 10.0], width=100, height=20)
    points = re.search(r'points="([^"]*)"', svg)
    assert points is not None
    ys = [float(pair.split(",")[1]) for pair in points.group(1).split()]
    assert ys[0] == pytest.approx(18.0)  # the lowest value at the bottom
    assert ys[2] == pytest.approx(2.0)  # the highest at the top
    assert "no data" in sparkline_svg([])
