"""A small synchronous driver for real worker processes, shared by the worker tests.

`WorkerProcess` starts ``python -m jupyter_serve.worker --fd N`` on one end of a
socketpair and exchanges frames with it (`WorkerConnection`: the frames over any
connected worker socket, a forked worker's too); `write_model` writes a model
directory (handler files plus an optional manifest).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_serve.wire.protocol import (
    Frame,
    InferenceRequest,
    InferenceResult,
    Kind,
    Parameter,
    StreamChunk,
    decode_chunk,
    decode_results,
    encode_infer,
    read_frame_sync,
    write_frame_sync,
)

# Only guards against a hung worker; no test depends on how long anything takes.
SAFETY_TIMEOUT = 120.0


def write_model(folder: Path, files: Mapping[str, str], handler: str | None = None) -> Path:
    """A model directory holding `files`, with a manifest naming `handler` if given."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    if handler is not None:
        manifest = {"runtime": "python", "model": {"modelName": folder.name, "handler": handler}}
        (folder / "MAR-INF").mkdir(exist_ok=True)
        (folder / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    return folder


def request(
    request_id: str = "r0",
    body: bytes | str | Any = b"",
    content_type: str = "application/octet-stream",
    headers: Mapping[str, str] | None = None,
    name: str = "body",
) -> InferenceRequest:
    """A one-parameter request; a non-bytes `body` is sent as JSON."""
    if isinstance(body, str):
        raw = body.encode()
    elif isinstance(body, (bytes, bytearray)):
        raw = bytes(body)
    else:
        raw, content_type = json.dumps(body).encode(), "application/json"
    return InferenceRequest(request_id, dict(headers or {}), (Parameter(name, content_type, raw),))


class WorkerConnection:
    """The parent's end of a worker's socket (`sock`): frames out, frames in."""

    sock: socket.socket

    def errors(self) -> str:
        return "(output not captured)"

    def exchange(self, frame: Frame) -> Frame:
        write_frame_sync(self.sock, frame)
        reply = read_frame_sync(self.sock)
        assert reply is not None, f"worker closed the connection; stderr:\n{self.errors()}"
        return reply

    def load(self, model_dir: Path, handler: str = "", **header: Any) -> Frame:
        load = {"model_name": model_dir.name, "model_dir": str(model_dir), "handler": handler}
        return self.exchange(Frame(Kind.LOAD, {**load, **header}))

    def infer(self, *requests: InferenceRequest, command: str = "predict") -> Frame:
        return self.exchange(encode_infer(list(requests), command))

    def streamed(self, *requests: InferenceRequest) -> tuple[list[StreamChunk], Frame]:
        """The intermediate chunks (S frames) of a batch, then its final R or E frame."""
        reply = self.infer(*requests)
        chunks: list[StreamChunk] = []
        while reply.kind is Kind.STREAM:
            chunks.append(decode_chunk(reply))
            reply = read_frame_sync(self.sock)
            assert reply is not None, f"worker closed the connection; stderr:\n{self.errors()}"
        return chunks, reply

    def results(self, *requests: InferenceRequest, command: str = "predict") -> list[Any]:
        """Results of a batch that must succeed."""
        reply = self.infer(*requests, command=command)
        assert reply.kind is Kind.RESULT, reply.header
        return decode_results(reply)

    def json_bodies(self, *requests: InferenceRequest) -> list[Any]:
        return [json.loads(r.body) for r in self.results(*requests)]


class WorkerProcess(WorkerConnection):
    """One worker subprocess and the parent's end of its socket."""

    def __init__(self, *extra_args: str, env: Mapping[str, str] | None = None) -> None:
        parent, child = socket.socketpair()
        # The worker's log output; both files are closed by __exit__.
        self.stdout = tempfile.TemporaryFile()  # noqa: SIM115
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115
        argv = [sys.executable, "-m", "jupyter_serve.worker", "--fd", str(child.fileno())]
        self.process = subprocess.Popen(
            [*argv, *extra_args],
            pass_fds=[child.fileno()],
            stdout=self.stdout,
            stderr=self.stderr,
            env=None if env is None else {**os.environ, **env},
        )
        child.close()
        parent.settimeout(SAFETY_TIMEOUT)
        self.sock = parent

    def close(self) -> int:
        """Close our end (EOF for the worker) and wait for its exit status."""
        self.sock.close()
        return self.wait()

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=SAFETY_TIMEOUT)
        finally:
            if self.process.poll() is None:
                self.process.kill()

    def output(self) -> str:
        self.stdout.seek(0)
        return self.stdout.read().decode(errors="replace")

    def errors(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sock.fileno() != -1:
            self.sock.close()
        self.wait()
        self.stdout.close()
        self.stderr.close()


def only_result(results: list[InferenceResult]) -> InferenceResult:
    assert len(results) == 1
    return results[0]
