"""An asyncio HTTP/1.1 load generator for loopback servers: closed loop or open loop.

Raw asyncio streams with keep-alive connections (one per concurrent client), so
the generator costs far less per request than the servers it measures. Every
point is bounded twice: at most `requests` requests and at most `duration`
seconds, whichever comes first. Every response's status and body go through a
`check(status, body) -> bool`; a failed check, a non-200 or a broken connection
counts as an error (and the connection is reopened).

* closed loop: `concurrency` clients, each sending its next request as soon as
  the previous one is answered;
* open loop: requests start on a fixed schedule of `rate` per second, on at
  most `concurrency` connections; latency runs from the scheduled start, so a
  server that falls behind shows it (no coordinated omission).

Stand-alone: ``python bench/loadgen.py URL [--body-file F] [-c 8] [-n 2000] [-t 5] [--rate R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

Check = Callable[[int, bytes], bool]


def accept_200(status: int, body: bytes) -> bool:
    return status == 200


@dataclass(frozen=True)
class Target:
    """What every request of a point sends."""

    url: str
    body: bytes
    content_type: str = "application/octet-stream"
    headers: tuple[tuple[str, str], ...] = ()
    check: Check = accept_200

    @property
    def address(self) -> tuple[str, int]:
        parts = urllib.parse.urlsplit(self.url)
        return parts.hostname or "127.0.0.1", parts.port or 80

    def request_bytes(self) -> bytes:
        parts = urllib.parse.urlsplit(self.url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        lines = [
            f"POST {path} HTTP/1.1",
            f"Host: {parts.netloc}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
            *(f"{name}: {value}" for name, value in self.headers),
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


@dataclass
class Tally:
    """Latencies of the successful requests and the error count of one point."""

    latencies: list[float] = field(default_factory=list)
    finished: list[float] = field(default_factory=list)  # perf_counter at each good answer
    errors: int = 0
    first_error: str | None = None
    elapsed: float = 0.0
    window: tuple[float, float] | None = None  # (start, deadline) of a time-bound point

    def failed(self, reason: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = reason

    def summary(self) -> dict[str, float | int | str | None]:
        ordered = sorted(self.latencies)
        rps = len(ordered) / self.elapsed if self.elapsed else 0.0
        if self.window is not None and self.elapsed > self.window[1] - self.window[0]:
            # Stopped by time: count answers within the window, not the drain after it.
            start, deadline = self.window
            rps = sum(t <= deadline for t in self.finished) / (deadline - start)
        return {
            "requests": len(ordered) + self.errors,
            "ok": len(ordered),
            "errors": self.errors,
            "first_error": self.first_error,
            "seconds": round(self.elapsed, 3),
            "rps": round(rps, 1),
            "p50_ms": _percentile(ordered, 50),
            "p90_ms": _percentile(ordered, 90),
            "p99_ms": _percentile(ordered, 99),
        }


def _percentile(ordered: list[float], pct: float) -> float | None:
    if not ordered:
        return None
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))
    return round(ordered[index] * 1000, 3)


class Connection:
    """One keep-alive HTTP/1.1 connection that sends a request and reads the whole answer."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.request = target.request_bytes()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def exchange(self) -> tuple[int, bytes]:
        if self.writer is None:
            host, port = self.target.address
            self.reader, self.writer = await asyncio.open_connection(host, port, limit=1 << 22)
        assert self.reader is not None
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status, headers = _parse_head(head)
        body = await _read_body(self.reader, headers)
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding", "").lower() != "chunked":
        return b""
    chunks = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        chunks.append(await reader.readexactly(size + 2))
        if size == 0:  # the last chunk, then no trailers
            return b"".join(chunk[:-2] for chunk in chunks)


async def _one(connection: Connection, tally: Tally, started: float) -> None:
    try:
        status, body = await connection.exchange()
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        connection.close()
        tally.failed(f"{type(exc).__name__}: {exc}")
        return
    if connection.target.check(status, body):
        now = time.perf_counter()
        tally.latencies.append(now - started)
        tally.finished.append(now)
    else:
        tally.failed(f"status {status}: {body[:200]!r}")


async def closed_loop(target: Target, concurrency: int, requests: int, duration: float) -> Tally:
    """`concurrency` clients back to back until `requests` were sent or `duration` passed.

    Throughput of a point stopped by time counts the answers within `duration`;
    latencies include the requests still in flight at the deadline.
    """
    tally = Tally()
    budget = iter(range(requests))
    deadline = time.perf_counter() + duration

    async def client() -> None:
        connection = Connection(target)
        for _ in budget:
            if time.perf_counter() >= deadline:
                break
            await _one(connection, tally, time.perf_counter())
        connection.close()

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    tally.elapsed = time.perf_counter() - began
    tally.window = (began, deadline)
    return tally


async def open_loop(
    target: Target, rate: float, concurrency: int, requests: int, duration: float
) -> Tally:
    """Start requests `rate` times a second on at most `concurrency` connections."""
    tally = Tally()
    idle: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(concurrency):
        idle.put_nowait(Connection(target))
    total = min(requests, max(1, int(rate * duration)))
    began = time.perf_counter()

    async def fire(scheduled: float) -> None:
        connection = await idle.get()
        await _one(connection, tally, scheduled)
        idle.put_nowait(connection)

    tasks = []
    for i in range(total):
        scheduled = began + i / rate
        await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))
        tasks.append(asyncio.ensure_future(fire(scheduled)))
    await asyncio.gather(*tasks)
    tally.elapsed = time.perf_counter() - began
    while not idle.empty():
        idle.get_nowait().close()
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description="POST one body to URL under load.")
    parser.add_argument("url")
    parser.add_argument("--body-file", help="the body (default: 1 KiB of zeros)")
    parser.add_argument("--content-type", default="application/octet-stream")
    parser.add_argument("--header", action="append", default=[], help="Name: value")
    parser.add_argument("-c", "--concurrency", type=int, default=8)
    parser.add_argument("-n", "--requests", type=int, default=2000)
    parser.add_argument("-t", "--duration", type=float, default=5.0)
    parser.add_argument("--rate", type=float, help="open loop at this many requests/s")
    args = parser.parse_args()
    body = open(args.body_file, "rb").read() if args.body_file else bytes(1024)  # noqa: SIM115
    headers = tuple((n.strip(), v.strip()) for n, _, v in (h.partition(":") for h in args.header))
    target = Target(args.url, body, args.content_type, headers)
    if args.rate:
        run = open_loop(target, args.rate, args.concurrency, args.requests, args.duration)
    else:
        run = closed_loop(target, args.concurrency, args.requests, args.duration)
    print(json.dumps(asyncio.run(run).summary()))


if __name__ == "__main__":
    main()
