"""`python -m jupyter_serve.worker`: exit codes, protocol errors and a light import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from worker_harness import WorkerProcess, request, write_model

from jupyter_serve.wire.protocol import Frame, Kind, encode_infer, write_frame_sync

ECHO = "def handle(data, context):\n    return data and [row['body'] for row in data]\n"


def test_eof_before_any_frame_exits_0() -> None:
    with WorkerProcess() as worker:
        assert worker.close() == 0


def test_eof_after_serving_exits_0(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "echo", {"echo.py": ECHO})
    with WorkerProcess() as worker:
        assert worker.load(folder, "echo").kind is Kind.RESULT
        assert worker.results(request(body=b"x"))[0].body == b"x"
        assert worker.close() == 0


def test_a_malformed_frame_exits_2() -> None:
    with WorkerProcess() as worker:
        worker.sock.sendall(b"\x00\x00\x00\x06Z\x00\x00\x00\x01{")
        assert worker.wait() == 2
        assert "protocol error" in worker.errors()


def test_an_inference_before_the_load_exits_2() -> None:
    with WorkerProcess() as worker:
        write_frame_sync(worker.sock, encode_infer([request()]))
        assert worker.wait() == 2


def test_a_second_load_exits_2(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "echo", {"echo.py": ECHO})
    with WorkerProcess() as worker:
        assert worker.load(folder, "echo").kind is Kind.RESULT
        write_frame_sync(worker.sock, Frame(Kind.LOAD, {"model_dir": str(folder)}))
        assert worker.wait() == 2


def test_a_load_header_without_model_dir_exits_2() -> None:
    with WorkerProcess() as worker:
        write_frame_sync(worker.sock, Frame(Kind.LOAD, {"model_name": "m"}))
        assert worker.wait() == 2
        assert "Bad load header" in worker.errors()


def test_fd_is_required() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_serve.worker"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "--fd" in done.stderr
