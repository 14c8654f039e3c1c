"""`python -m jupyter_serve.worker`: exit codes, protocol errors and a light import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from worker_harness import WorkerProcess, request, write_model

from jupyter_serve.protocol import Frame, Kind, encode_infer, read_frame_sync, write_frame_sync

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


# ---- --spare: warm up first, take the model's settings from the load request ----------

# Reports what the spare looked like when this module was imported, and since.
SETTINGS_PROBE = """
import os
import sys

import spare_dep

TORCH_WAS_WARM = "torch" in sys.modules


def handle(data, context):
    if data is None:
        return None
    import torch

    return [{
        "dep": spare_dep.VALUE,
        "torch_was_warm": TORCH_WAS_WARM,
        "threads": torch.get_num_threads(),
        "set": os.environ.get("JS_SPARE_SET"),
        "gone": os.environ.get("JS_SPARE_GONE"),
        "deps_at": sys.path.index(os.environ["JS_DEPS"]),
        "package_at": sys.path.index(os.environ["JS_ROOT"]),
    }]
"""
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


def test_a_spare_announces_itself_then_loads_with_the_settings_of_the_load_request(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    deps = write_model(tmp_path / "deps", {"spare_dep.py": "VALUE = 'from deps'\n"})
    folder = write_model(tmp_path / "probe", {"probe.py": SETTINGS_PROBE})
    env = {"JS_SPARE_GONE": "still here", "PYTHONPATH": PACKAGE_ROOT}
    with WorkerProcess("--spare", env=env) as worker:
        hello = read_frame_sync(worker.sock)
        assert hello is not None
        assert (hello.kind, hello.header["message"]) == (Kind.RESULT, "spare")
        assert hello.header["pid"] == worker.process.pid
        assert {"torch", "jupyter_serve"} <= set(hello.header["modules"])
        changes = {
            "JS_SPARE_SET": "yes", "JS_SPARE_GONE": None,
            "JS_DEPS": str(deps), "JS_ROOT": PACKAGE_ROOT,
        }  # fmt: skip
        loaded = worker.load(folder, "probe", sys_path=[str(deps)], env=changes, torch_threads=3)
        assert loaded.kind is Kind.RESULT, worker.errors()
        [answer] = worker.json_bodies(request())
    assert answer["deps_at"] > answer["package_at"]  # where PYTHONPATH would have put it
    assert {key: answer[key] for key in ("dep", "torch_was_warm", "threads", "set", "gone")} == {
        "dep": "from deps", "torch_was_warm": True, "threads": 3, "set": "yes", "gone": None,
    }  # fmt: skip


def test_a_spare_whose_server_hangs_up_exits_0() -> None:
    with WorkerProcess("--spare") as worker:
        assert worker.close() == 0
