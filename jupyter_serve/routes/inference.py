"""Inference routes: `ping` (and, as the serving runtime lands, predictions)."""

from __future__ import annotations

from tornado import web

from .base import ServeRoute


class PingRoute(ServeRoute):
    """`GET {base_url}serve/ping`: TorchServe's health check."""

    @web.authenticated
    def get(self) -> None:
        self.write_json({"status": "Healthy"})
