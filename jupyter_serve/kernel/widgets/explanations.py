"""The explanation viewer: `/explanations` output shown as a heatmap, coloured tokens or bars.

`show_explanation` takes what the explanations route answers for one request
(decoded JSON, or the raw bytes/str) and picks a view:

- image attributions, `[C][H][W]` or `[H][W]` nested lists (a leading batch of one
  is dropped): channels summed, a signed heatmap over the input image;
- text attributions, TorchServe's `{"words", "importances", "delta"}` or a flat
  list with `tokens=`: each token on a background red (positive) or blue
  (negative), opacity by magnitude;
- tabular attributions, a flat list (with `feature_names=`) or a `{name: value}`
  mapping: horizontal bars, largest magnitude first.

The `*_html`/`*_png` functions are pure; only `show_explanation` builds a widget.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from jupyter_serve.kernel.widgets.plots import bars_svg, heatmap_png, signed_colour

__all__ = ["image_png", "show_explanation", "tabular_html", "text_html", "to_map"]

Kind = Literal["auto", "image", "text", "tabular"]


def show_explanation(
    explanation: Any,
    *,
    kind: Kind = "auto",
    image: Any = None,
    tokens: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
) -> Any:
    """An ipywidgets view of one explanation.

    Args:
        explanation: the explanations route's answer for one input (JSON value, or
            its bytes/str encoding).
        kind: the view; "auto" chooses by shape (see the module docstring).
        image: the input image (PIL image or encoded bytes) under the heatmap.
        tokens: the words of a text explanation given as a flat list.
        feature_names: the names of tabular features, in the explanation's order.

    Returns:
        `ipywidgets.Image` (image) or `ipywidgets.HTML` (text, tabular).

    Raises:
        ValueError: the explanation does not have a shape the chosen view can show.
    """
    import ipywidgets

    data = _decode(explanation)
    chosen = _guess(data, tokens) if kind == "auto" else kind
    if chosen == "image":
        return ipywidgets.Image(value=image_png(data, image), format="png")
    if chosen == "text":
        words, values = _text_parts(data, tokens)
        return ipywidgets.HTML(value=text_html(words, values))
    if chosen == "tabular":
        names, values = _tabular_parts(data, feature_names)
        return ipywidgets.HTML(value=tabular_html(values, names))
    raise ValueError(f"unknown explanation kind {kind!r}")


def _decode(explanation: Any) -> Any:
    if isinstance(explanation, (bytes, bytearray, str)):
        return json.loads(explanation)
    return explanation


def _guess(data: Any, tokens: Sequence[str] | None) -> str:
    if isinstance(data, Mapping):
        return "text" if "importances" in data else "tabular"
    depth = _depth(_squeeze(data))
    if depth >= 2:
        return "image"
    return "text" if tokens is not None else "tabular"


def _depth(data: Any) -> int:
    depth = 0
    while isinstance(data, (list, tuple)) and data:
        depth, data = depth + 1, data[0]
    return depth


def _squeeze(data: Any) -> Any:
    """Drop leading lists of one element (a batch of one) around the attributions."""
    while isinstance(data, (list, tuple)) and len(data) == 1 and isinstance(data[0], (list, tuple)):
        data = data[0]
    return data


# ---- image -------------------------------------------------------------------


def to_map(attributions: Any) -> list[list[float]]:
    """A [H][W] map from [H][W], [C][H][W] (channels summed) or a leading batch of one."""
    data = attributions
    while _depth(data) > 3 and len(data) == 1:
        data = data[0]
    depth = _depth(data)
    if depth == 2:
        return [[float(v) for v in row] for row in data]
    if depth == 3:
        return _sum_channels(data)
    raise ValueError(f"image attributions need 2 or 3 dimensions, got {depth}")


def _sum_channels(channels: Sequence[Sequence[Sequence[float]]]) -> list[list[float]]:
    height, width = len(channels[0]), len(channels[0][0])
    return [[sum(float(c[y][x]) for c in channels) for x in range(width)] for y in range(height)]


def image_png(attributions: Any, image: Any = None, alpha: float = 0.6) -> bytes:
    """PNG bytes of the attribution heatmap over `image` (or over white)."""
    grid = to_map(attributions)
    if not grid or not grid[0]:
        raise ValueError("image attributions are empty")
    return heatmap_png(grid, image, alpha)


# ---- text --------------------------------------------------------------------


def _text_parts(data: Any, tokens: Sequence[str] | None) -> tuple[list[str], list[float]]:
    if isinstance(data, Mapping):
        words = list(data.get("words") or tokens or [])
        values = data.get("importances") or []
    else:
        words, values = list(tokens or []), _squeeze(data)
    if len(words) != len(values):
        raise ValueError(f"{len(words)} tokens but {len(values)} attributions")
    return [str(w) for w in words], [float(v) for v in values]


def text_html(tokens: Sequence[str], values: Sequence[float]) -> str:
    """Tokens as spans on a red (positive) or blue (negative) background by magnitude."""
    scale = max((abs(v) for v in values), default=0.0)
    spans = [_token_span(token, value, scale) for token, value in zip(tokens, values, strict=True)]
    return f'<div class="jupyter-serve-text" style="line-height:1.9">{" ".join(spans)}</div>'


def _token_span(token: str, value: float, scale: float) -> str:
    (red, green, blue), opacity = signed_colour(value, scale)
    sign = "positive" if value >= 0 else "negative"
    return (
        f'<span class="token {sign}" title="{value:.4g}" '
        f'style="background-color:rgba({red},{green},{blue},{opacity:.3f});'
        f'padding:1px 2px;border-radius:3px">{html.escape(token)}</span>'
    )


# ---- tabular -----------------------------------------------------------------


def _tabular_parts(data: Any, names: Sequence[str] | None) -> tuple[list[str], list[float]]:
    if isinstance(data, Mapping):
        return [str(k) for k in data], [float(v) for v in data.values()]
    values = [float(v) for v in _squeeze(data)]
    labels = list(names) if names is not None else [f"feature {i}" for i in range(len(values))]
    if len(labels) != len(values):
        raise ValueError(f"{len(labels)} feature names but {len(values)} attributions")
    return [str(label) for label in labels], values


def tabular_html(values: Sequence[float], names: Sequence[str], *, top: int | None = None) -> str:
    """Bars of the attributions, largest magnitude first (the first `top` only if given)."""
    order = sorted(range(len(values)), key=lambda i: abs(values[i]), reverse=True)[:top]
    svg = bars_svg([values[i] for i in order], [names[i] for i in order])
    return f'<div class="jupyter-serve-tabular">{svg}</div>'
