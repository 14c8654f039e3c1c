"""Benchmark handler `echo`: returns each request's body unchanged (pure serving overhead)."""

from __future__ import annotations


class Echo:
    def initialize(self, context):
        self.initialized = True

    def handle(self, data, context):
        return [row.get("body") or row.get("data") for row in data]
