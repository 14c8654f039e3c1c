"""Small hand-written plots: SVG sparklines and bar charts, PNG attribution heatmaps.

No plotting library: SVG strings for the dashboard's sparklines and the tabular
explanation bars, and a PNG built with Pillow for image attributions (a signed
overlay: red where the attribution is positive, blue where it is negative,
opacity by magnitude). Everything here is a pure function returning a string or
bytes, so tests can read the result back.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from typing import Any

__all__ = [
    "NEGATIVE",
    "POSITIVE",
    "bars_svg",
    "heatmap_png",
    "signed_colour",
    "sparkline_svg",
]

POSITIVE = (214, 39, 40)  # red
NEGATIVE = (31, 119, 180)  # blue
_LINE = "#1f77b4"
_MIN_SIDE = 224


def signed_colour(value: float, scale: float) -> tuple[tuple[int, int, int], float]:
    """(RGB, opacity 0..1) of an attribution: red if positive, blue if negative."""
    opacity = min(abs(value) / scale, 1.0) if scale > 0 else 0.0
    return (POSITIVE if value >= 0 else NEGATIVE), opacity


def sparkline_svg(
    values: Sequence[float],
    *,
    width: int = 160,
    height: int = 32,
    title: str = "",
    unit: str = "",
    digits: int = 1,
) -> str:
    """A polyline of `values` scaled to the box, the last value marked with a dot. With a
    `title`, a caption above the plot says what it shows, its last value and its range
    (in `unit`), and hovering it says over how many polls."""
    caption = 12 if title else 0
    head = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + caption}">'
    if not values:
        empty = f'<text x="2" y="{height + caption - 4}" font-size="10">no data</text>'
        return (
            f"{head}{_caption(title, 'waiting for the first polls') if title else ''}{empty}</svg>"
        )
    low, high, last = min(values), max(values), values[-1]
    tip = f"<title>{html.escape(f'{title}: last {len(values)} polls')}</title>" if title else ""
    figures = f"{last:.{digits}f} {unit} (range {low:.{digits}f} to {high:.{digits}f})".strip()
    label = _caption(title, figures) if title else ""
    points = [(x, y + caption) for x, y in _points(values, width, height)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    x, y = points[-1]
    return (
        f'{head}{tip}{label}<polyline fill="none" stroke="{_LINE}" stroke-width="1.5" '
        f'points="{line}"/><circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{_LINE}"/></svg>'
    )


def _caption(title: str, figures: str) -> str:
    text = html.escape(f"{title}: {figures}")
    return f'<text x="2" y="10" font-size="10" fill="#555">{text}</text>'


def _points(values: Sequence[float], width: int, height: int) -> list[tuple[float, float]]:
    low, high = min(values), max(values)
    span = high - low or 1.0
    step = (width - 4) / max(len(values) - 1, 1)
    return [
        (2 + i * step, height - 2 - (v - low) / span * (height - 4)) for i, v in enumerate(values)
    ]


def bars_svg(
    values: Sequence[float], labels: Sequence[str], *, width: int = 420, bar: int = 18
) -> str:
    """Horizontal bars around a zero line, one row per value, in the order given."""
    label_width, value_width = 140, 60
    plot = width - label_width - value_width
    scale = max((abs(v) for v in values), default=0.0) or 1.0
    has_negative = any(v < 0 for v in values)
    zero = label_width + (plot / 2 if has_negative else 0)
    half = plot / 2 if has_negative else plot
    rows = [
        _bar_row(i, v, label, zero, half / scale, bar)
        for i, (v, label) in enumerate(zip(values, labels, strict=True))
    ]
    height = bar * len(values) + 4
    axis = f'<line x1="{zero:.1f}" y1="0" x2="{zero:.1f}" y2="{height}" stroke="#888"/>'
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">{"".join(rows)}{axis}</svg>'
    )


def _bar_row(index: int, value: float, label: str, zero: float, unit: float, bar: int) -> str:
    top = index * bar + 2
    length = abs(value) * unit
    left = zero if value >= 0 else zero - length
    red, green, blue = POSITIVE if value >= 0 else NEGATIVE
    text_y = top + bar * 0.7
    return (
        f'<g class="bar" data-label="{html.escape(label)}" data-value="{value:.6g}">'
        f'<text x="2" y="{text_y:.1f}">{html.escape(label)}</text>'
        f'<rect x="{left:.1f}" y="{top}" width="{length:.1f}" height="{bar - 4}" '
        f'fill="rgb({red},{green},{blue})"/>'
        f'<text x="{zero + unit * abs(value) + 4 if value >= 0 else zero + 4:.1f}" '
        f'y="{text_y:.1f}">{value:.3g}</text></g>'
    )


def heatmap_png(
    attributions: Sequence[Sequence[float]], image: Any = None, alpha: float = 0.6
) -> bytes:
    """PNG of a [H][W] attribution map, laid over `image` (PIL image or encoded bytes)."""
    from PIL import Image

    overlay = _overlay(attributions, alpha)
    base = _base_image(image, overlay.size)
    if base.size != overlay.size:
        overlay = overlay.resize(base.size, Image.Resampling.NEAREST)
    picture = Image.alpha_composite(base, overlay).convert("RGB")
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def _overlay(attributions: Sequence[Sequence[float]], alpha: float) -> Any:
    from PIL import Image

    height, width = len(attributions), len(attributions[0]) if attributions else 0
    scale = max((abs(v) for row in attributions for v in row), default=0.0)
    pixels = bytearray()
    for row in attributions:
        for value in row:
            (red, green, blue), opacity = signed_colour(float(value), scale)
            pixels += bytes((red, green, blue, round(255 * alpha * opacity)))
    return Image.frombytes("RGBA", (width, height), bytes(pixels))


def _base_image(image: Any, size: tuple[int, int]) -> Any:
    """The picture under the overlay: `image` as RGBA, or white enlarged to a visible size."""
    from PIL import Image

    if image is None:
        factor = max(1, _MIN_SIDE // max(size))
        return Image.new("RGBA", (size[0] * factor, size[1] * factor), (255, 255, 255, 255))
    if isinstance(image, (bytes, bytearray)):
        image = Image.open(io.BytesIO(image))
    return image.convert("RGBA")
