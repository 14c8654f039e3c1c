"""The frontend ceiling: a bare tornado server that answers every POST with its body.

    python bench/ceiling.py PORT

No model, no worker, no auth, no batching: only tornado's HTTP/1.1 parsing and
writing, answered by a routing-rule callable. What it serves per second on this machine, with the
same load generator, bounds a frontend built on tornado's HTTP layer; the runner
reports jupyter_serve's and TorchServe's echo throughput against it. jupyter_serve's
serve lane (`server/http/lane.py`) reads token-authenticated predictions before tornado's
HTTP layer, so since the lane jupyter_serve's echo can pass this figure.
"""

from __future__ import annotations

import asyncio
import sys

from tornado import httputil
from tornado.httpserver import HTTPServer
from tornado.routing import PathMatches, Rule, RuleRouter


def echo(request: httputil.HTTPServerRequest, **_: object) -> None:
    body = request.body or b""
    headers = httputil.HTTPHeaders({"Content-Length": str(len(body))})
    connection = request.connection
    assert connection is not None
    connection.write_headers(httputil.ResponseStartLine("HTTP/1.1", 200, "OK"), headers, body)
    connection.finish()


async def main(port: int) -> None:
    router = RuleRouter([Rule(PathMatches(r"/.*"), echo)])
    HTTPServer(router).listen(port, "127.0.0.1")
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
