"""Notebook widgets: the live model dashboard and the explanation viewer.

- `ModelDashboard(client)`: models, workers, queue and live figures of a server,
  polled on the kernel's event loop (`dashboard`, `poller`, `fetch`, `snapshot`, `trends`,
  `render`, `prometheus`);
- `show_explanation(explanation, ...)`: `/explanations` output as a heatmap,
  coloured tokens or bars (`explanations`, `plots`).

Names are loaded on first use, so importing this package does not import
ipywidgets or Pillow.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DashboardSnapshot",
    "ModelDashboard",
    "Poller",
    "fetch_snapshot",
    "render_snapshot",
    "show_explanation",
    "tabular_html",
]

_HOMES = {
    "DashboardSnapshot": "snapshot",
    "fetch_snapshot": "fetch",
    "ModelDashboard": "dashboard",
    "render_snapshot": "dashboard",
    "Poller": "poller",
    "show_explanation": "explanations",
    "tabular_html": "explanations",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
