"""Worker output stays small: lines cut with a mark, the buffer bounded in bytes.

jupyter_serve.server.pool.logs with real workers printing megabyte lines, fresh and forked:
what the buffer, the `jupyter_serve.worker` logger and the worker's tail get. The
tests wait for a handler's last line through `WorkerLog.subscribe`, never by sleeping.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from factory_harness import Fleet, ask, run, spec_maker

from jupyter_serve.server.models import ModelSpec
from jupyter_serve.server.pool import WorkerLog
from jupyter_serve.server.pool.logs import (
    CUT_MARK,
    MAX_LINE_CHARS,
    MAX_LOG_BYTES,
    clip,
    newest_fitting,
    pump_lines,
)

# Prints a 1 MiB line on stdout and stderr, then 300 lines of 20 KB, then "done".
LOUD = """
import sys


def handle(data, context):
    if data is None:
        return None
    print("x" * (1 << 20))
    print("y" * (1 << 20), file=sys.stderr)
    for i in range(300):
        print(f"{i:04d}" + "z" * 20000)
    print("done-err", file=sys.stderr, flush=True)
    print("done-out", flush=True)
    return [{"pid": 0} for _ in data]
"""


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., ModelSpec]:
    return spec_maker(tmp_path)


async def lines_until(log: WorkerLog, ask_it: Callable[[], Any], *last: str) -> list[str]:
    """Every line `log` gets while `ask_it()` runs, until lines ending with each of `last`."""
    seen: list[str] = []
    waiting, done = set(last), asyncio.Event()

    def listen(line: str) -> None:
        seen.append(line)
        waiting.difference_update({text for text in last if line.endswith(text)})
        if not waiting:
            done.set()

    unsubscribe = log.subscribe(listen)
    try:
        await ask_it()
        await done.wait()
    finally:
        unsubscribe()
    return seen


@pytest.mark.parametrize("fork", [False, True], ids=["fresh", "forked"])
def test_a_worker_printing_megabyte_lines_leaves_cut_lines_in_a_bounded_buffer(
    make_spec: Callable[..., ModelSpec], caplog: pytest.LogCaptureFixture, fork: bool
) -> None:
    if fork:
        pytest.importorskip("torch")
    caplog.set_level(logging.INFO, logger="jupyter_serve.worker")

    async def main() -> dict[str, Any]:
        async with Fleet(enabled=fork) as fleet:
            pool = fleet.pool(make_spec("loud", LOUD))
            assert (await pool.scale(1)).ok
            [worker] = pool.processes
            seen = await lines_until(pool.log, lambda: ask(pool), "done-out", "done-err")
            return {
                "forked": worker.forked, "seen": seen, "kept": list(pool.log.lines),
                "size": pool.log.size, "tail": worker.output_tail().splitlines(),
            }  # fmt: skip

    got = run(main())
    assert got["forked"] is fork
    cut = ["x" * MAX_LINE_CHARS + CUT_MARK, "y" * MAX_LINE_CHARS + CUT_MARK]
    assert [any(line.endswith(f"] {text}") for line in got["seen"]) for text in cut] == [True, True]
    assert max(map(len, got["seen"])) < MAX_LINE_CHARS + len(CUT_MARK) + 60  # stamp, prefix
    logged = [r.getMessage() for r in caplog.records if r.name == "jupyter_serve.worker"]
    assert [any(message.endswith(f"] {text}") for message in logged) for text in cut] == [
        True,
        True,
    ]
    assert max(map(len, logged)) < MAX_LINE_CHARS + len(CUT_MARK) + 40
    kept = got["kept"]
    assert got["size"] == sum(len(line.encode()) for line in kept) <= MAX_LOG_BYTES
    assert kept == got["seen"][-len(kept) :]  # the newest lines
    assert 100 < len(kept) < 300  # fewer than were printed: the bytes bound, not the count
    assert all(len(line) <= MAX_LINE_CHARS + len(CUT_MARK) for line in got["tail"])


def test_a_long_line_is_read_in_pieces_and_cut_with_a_mark() -> None:
    async def main() -> list[str]:
        stream = asyncio.StreamReader(limit=64 * 1024)
        stream.feed_data(b"a" * (3 << 20) + b"\r\nshort\n" + "é".encode() * 40000)
        stream.feed_eof()
        emitted: list[str] = []
        await pump_lines(stream, emitted.append)
        return emitted

    assert run(main()) == [
        "a" * MAX_LINE_CHARS + CUT_MARK,
        "short",
        "é" * MAX_LINE_CHARS + CUT_MARK,  # the last line, without its newline
    ]


def test_every_line_emitted_is_cut_and_the_buffer_keeps_the_newest_within_its_bytes() -> None:
    log = WorkerLog("m", max_bytes=100_000)
    log.emit("w", "a handler's exception message " * 100_000)
    [line] = log.lines
    assert line.endswith(CUT_MARK)
    assert len(line) < MAX_LINE_CHARS + len(CUT_MARK) + 40
    for i in range(100):
        log.emit("w", f"{i:03d}" + "-" * 5000)
    assert log.size == sum(len(line.encode()) for line in log.lines) <= 100_000
    assert [line.split("] ")[1][:3] for line in log.lines] == [f"{i:03d}" for i in range(81, 100)]
    assert clip(clip("b" * 10**6)) == clip("b" * 10**6)
    assert clip("b" * MAX_LINE_CHARS) == "b" * MAX_LINE_CHARS


def test_an_answer_shows_the_newest_lines_its_json_bytes_allow() -> None:
    lines = [f"{i:04d} " + "\x01" * 8000 for i in range(200)]  # 6 JSON bytes per character
    shown = newest_fitting(lines, budget=1 << 20)
    assert 0 < len(shown) < len(lines)
    assert shown == lines[-len(shown) :]
    assert sum(len(line) * 6 for line in shown) <= 1 << 20
