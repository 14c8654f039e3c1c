"""TorchServe 0.12's stateful examples (tests/data/torchserve_stateful) as archives, and the
scripted sessions tests send to them, on jupyter_serve or on a real TorchServe alike.

`build_archives(store)` archives both example handlers unchanged with jupyter_serve's
archiver (TorchServe 0.12 serves the same files). A session speaks raw HTTP/1.1, one
connection per request, and returns a transcript: per request its status, its body chunk
by chunk as the server framed it, the sequence and streaming headers, so that two servers'
transcripts compare as they are (a server-issued `ts-seq-<uuid4>` id reads `ts-seq-*`).
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_serve.archive import ArchiveSpec, build_mar

EXAMPLES = Path(__file__).with_name("data") / "torchserve_stateful"
SEQUENCE_ID = "ts_request_sequence_id"
ISSUED = re.compile(r"ts-seq-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
IDLE_MS = 4000

SEQUENCE_CONFIG = """\
minWorkers: 2
maxWorkers: 2
batchSize: 4
maxNumSequence: 4
sequenceMaxIdleMSec: 5000
maxSequenceJobQueueSize: 10
sequenceBatching: true

handler:
  cache:
    capacity: 4
"""
CONTINUOUS_CONFIG = f"""\
minWorkers: 2
maxWorkers: 2
batchSize: 1
maxNumSequence: 4
sequenceMaxIdleMSec: {IDLE_MS}
maxSequenceJobQueueSize: 10
sequenceBatching: true
continuousBatching: true

handler:
  cache:
    capacity: 4
"""


def build_archives(store: Path) -> dict[str, Path]:
    """`sequence.mar` and `continuous.mar`: the two example handlers with configs of the
    examples' tests (a shorter idle time for the continuous one), the example's model
    file and seeded weights under its weights' name (tests/data/torchserve_stateful)."""
    import torch

    work = store / "src"
    work.mkdir(parents=True, exist_ok=True)
    namespace: dict[str, Any] = {}
    exec(compile((EXAMPLES / "model.py").read_text(), "model.py", "exec"), namespace)
    torch.manual_seed(0)
    torch.save(namespace["Net"]().state_dict(), work / "model_cnn.pt")
    archives = {}
    for name, folder, config in (("sequence", "sequence_batching", SEQUENCE_CONFIG),
                                 ("continuous", "sequence_continuous_batching",
                                  CONTINUOUS_CONFIG)):  # fmt: skip
        (work / f"{name}.yaml").write_text(config)
        spec = ArchiveSpec(
            model_name=name, version="1.0",
            handler=str(EXAMPLES / folder / "stateful_handler.py"),
            serialized_file=str(work / "model_cnn.pt"), model_file=str(EXAMPLES / "model.py"),
            requirements_file=str(EXAMPLES / "requirements.txt"),
            config_file=str(work / f"{name}.yaml"), export_path=str(store), force=True,
        )  # fmt: skip
        archives[name] = build_mar(spec)
    return archives


@dataclass(frozen=True)
class Target:
    """Where a server answers predictions (`{base}predictions/{model}`), and with what headers."""

    base: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class Answer:
    status: int
    chunks: list[str]
    headers: dict[str, str]

    def transcript(self, known: dict[str, str]) -> dict[str, Any]:
        """What two servers must agree on; ids they issued read `ts-seq-*`, known ones by
        their name in `known`."""
        names = {value: key for key, value in known.items()}
        seen = {}
        for key in (SEQUENCE_ID, "ts_request_sequence_end", "ts_stream_next"):
            value = self.headers.get(key)
            if value is not None:
                seen[key] = names.get(value) or ISSUED.sub("ts-seq-*", value)
        body: Any = self.chunks
        if self.status >= 400 and len(self.chunks) == 1:
            body = json.loads(self.chunks[0])
        return {"status": self.status, "body": body, "headers": seen}


@dataclass
class Session:
    """Requests to one model on one server; `log` keeps each answer's transcript."""

    target: Target
    model: str
    known: dict[str, str] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)

    async def post(self, body: bytes, sequence: str | None = None, *, json_body: bool = False,
                   leave_after_first_chunk: bool = False, first_chunk: asyncio.Event | None = None,
                   logged: bool = True) -> Answer:  # fmt: skip
        headers = dict(self.target.headers)
        if sequence is not None:
            headers[SEQUENCE_ID] = sequence
        if json_body:
            headers["Content-Type"] = "application/json"
        url = urllib.parse.urlsplit(f"{self.target.base}predictions/{self.model}")
        answer = await exchange(url, body, headers, leave_after_first_chunk, first_chunk)
        if logged:  # else the caller logs it (two answers racing to finish)
            self.log.append(answer.transcript(self.known))
        return answer


async def exchange(url: urllib.parse.SplitResult, body: bytes, headers: dict[str, str],
                   leave: bool, first_chunk: asyncio.Event | None) -> Answer:  # fmt: skip
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        lines = [f"POST {url.path} HTTP/1.1", f"Host: {url.netloc}",
                 f"Content-Length: {len(body)}", "Connection: close",
                 *(f"{name}: {value}" for name, value in headers.items())]  # fmt: skip
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        status_line, *fields = head.rstrip("\r\n").split("\r\n")
        got = {name.strip().lower(): value.strip()
               for name, _, value in (line.partition(":") for line in fields)}  # fmt: skip
        if got.get("transfer-encoding") != "chunked":
            chunks = [(await reader.readexactly(int(got.get("content-length", "0")))).decode()]
        else:
            chunks = await read_chunks(reader, leave, first_chunk)
        return Answer(int(status_line.split()[1]), chunks, got)
    finally:
        writer.close()


async def read_chunks(reader: asyncio.StreamReader, leave: bool,
                      first_chunk: asyncio.Event | None) -> list[str]:  # fmt: skip
    chunks = []
    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
        chunks.append((await reader.readexactly(size)).decode())
        await reader.readexactly(2)
        if first_chunk is not None:
            first_chunk.set()
        if leave:
            return chunks
    await reader.readexactly(2)
    return chunks


async def sequence_sessions(target: Target) -> list[dict[str, Any]]:
    """TorchServe's sequence_batching test: two clients, each with its own named sequence,
    sending five requests one after the other, at the same time."""

    async def client(sequence: str, values: list[int]) -> list[dict[str, Any]]:
        session = Session(target, "sequence", {"<seq>": sequence})
        for value in values:
            await session.post(str(value).encode(), sequence)
        return session.log

    first, second = await asyncio.gather(client("seq_0", [1, 3, 5, 7, 9]),
                                         client("seq_1", [2, 4, 6, 8, 10]))  # fmt: skip
    return [*first, *second]


async def idle_session(target: Target) -> list[dict[str, Any]]:
    """A sequence started, left idle past sequenceMaxIdleMSec, then named again: a new
    sequence under that id, on the other worker, whose handler never saw it."""
    session = Session(target, "continuous")
    started = await session.post(b"2")
    session.known["<seq>"] = started.headers[SEQUENCE_ID]
    await asyncio.sleep(IDLE_MS / 1000 + 2)  # past the idle time: the sequence is gone
    await session.post(b"2", session.known["<seq>"])
    return session.log


async def interleaved_sessions(target: Target) -> list[dict[str, Any]]:
    """TorchServe's test_infer_stateful: two sequences started by the server, each then
    sent four more values, at the same time."""

    async def client(first: int, step: int) -> list[dict[str, Any]]:
        session = Session(target, "continuous")
        started = await session.post(str(first).encode())
        session.known["<seq>"] = started.headers[SEQUENCE_ID]
        for value in range(first + step, first + 5 * step, step):
            await session.post(str(value).encode(), session.known["<seq>"])
        return session.log

    first, second = await asyncio.gather(client(2, 2), client(4, 4))
    return [*first, *second]


async def cancel_session(target: Target) -> list[dict[str, Any]]:
    """Start, a step, a streamed request cancelled (-1) once its first chunk came, an end."""
    session = Session(target, "continuous")
    started = await session.post(b"2")
    sequence = session.known["<seq>"] = started.headers[SEQUENCE_ID]
    await session.post(b"4", sequence)
    first_chunk = asyncio.Event()
    stream = asyncio.ensure_future(
        session.post(
            b'{"input": 3}', sequence, json_body=True, first_chunk=first_chunk, logged=False
        )
    )
    await first_chunk.wait()
    cancel = await session.post(b"-1", sequence, logged=False)
    # the stream's last chunk and the cancel's answer leave together: log them in one order
    session.log += [(await stream).transcript(session.known), cancel.transcript(session.known)]
    await session.post(b"0", sequence)
    return session.log


async def disconnect_session(target: Target) -> list[dict[str, Any]]:
    """A streamed request whose client leaves after its first chunk, then the sequence's
    end: the server stops the stream for nobody and the sequence goes on."""
    session = Session(target, "continuous")
    started = await session.post(b"2")
    sequence = session.known["<seq>"] = started.headers[SEQUENCE_ID]
    await session.post(b'{"input": 3}', sequence, json_body=True, leave_after_first_chunk=True)
    await asyncio.sleep(2.0)  # the step under way (a second) ends; the stream is dropped
    await session.post(b"0", sequence)
    return session.log
