"""Inference routes: `ping`, predictions and explanations (TorchServe's inference API)."""

from __future__ import annotations

from typing import Any

from tornado import web

from .base import ServeRoute


class PingRoute(ServeRoute):
    """`GET {base_url}serve/ping`: 200 Healthy, or 500 Unhealthy when a model lacks workers."""

    @web.authenticated
    def get(self) -> None:
        if self.registry.healthy():
            self.write_json({"status": "Healthy"})
        else:
            self.write_json({"status": "Unhealthy"}, status=500)


ROUTES: list[tuple[str, type[Any]]] = [
    (r"ping", PingRoute),
]
