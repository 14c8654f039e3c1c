"""The metrics route: Prometheus text with TorchServe's metric names.

`GET metrics` answers `ServeMetrics.render` in the Prometheus text format 0.0.4
as TorchServe's Java exposition writes it; repeated `name[]` query arguments
select metric families, as in TorchServe. `GET metrics?format=json` answers
`ServeMetrics.snapshot()` instead (per-model p50/p99, batch fill, throughput) for
the dashboard.
"""

from __future__ import annotations

from typing import Any

from jupyter_serve.server.http.access import READ, allow
from jupyter_serve.server.http.base import ServeRoute

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsRoute(ServeRoute):
    """`GET metrics[?name[]=X&name[]=Y]`."""

    @allow(READ)
    def get(self) -> None:
        if self.get_query_argument("format", "") == "json":  # the dashboard's figures
            self.write_json(self.metrics.snapshot())
            return
        names = self.get_query_arguments("name[]")
        self.finish(self.metrics.render(names or None), set_content_type=CONTENT_TYPE)


ROUTES: list[tuple[str, type[Any]]] = [
    (r"metrics(?:/.*)?", MetricsRoute),  # TorchServe answers metrics/anything too
]
