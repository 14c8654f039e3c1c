"""Benchmark handler `loud` (the stall probe's): prints each request's body, then echoes it.

A handler that logs what it is sent is common; its worker's output is what the
server keeps for `GET serve/logs/{m}` and the panel's Log tab.
"""

from __future__ import annotations


def handle(data, context):
    if not data:
        return None
    bodies = [row.get("body") or row.get("data") or b"" for row in data]
    for body in bodies:
        print(bytes(body).decode("latin-1"), flush=True)
    return [len(body) for body in bodies]
