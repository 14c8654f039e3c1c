"""`python -m jupyter_serve.worker.factory`: the fork server itself, driven over its socket.

A real factory process gets fork requests (a socket end and two pipe ends per
worker, as SCM_RIGHTS) the way jupyter_serve.server.pool.factory sends them; its forked
workers are then driven frame by frame (`worker_harness.WorkerConnection`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from worker_harness import SAFETY_TIMEOUT, WorkerConnection, request, write_model

from jupyter_serve.wire.protocol import (
    Frame,
    InferenceResult,
    Kind,
    decode_packet,
    decode_results,
    encode,
    encode_infer,
    read_frame_sync,
)
from jupyter_serve.worker.factory import Factory

pytest.importorskip("torch")

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)

# Reports what the worker looked like when its handler module was imported, and since.
SETTINGS_PROBE = """
import os
import sys

import factory_dep

TORCH_WAS_WARM = "torch" in sys.modules


def handle(data, context):
    if data is None:
        return None
    import torch

    print("probe handled a batch", flush=True)
    return [{
        "dep": factory_dep.VALUE,
        "torch_was_warm": TORCH_WAS_WARM,
        "threads": torch.get_num_threads(),
        "set": os.environ.get("JS_FACTORY_SET"),
        "gone": os.environ.get("JS_FACTORY_GONE"),
        "deps_at": sys.path.index(os.environ["JS_DEPS"]),
        "package_at": sys.path.index(os.environ["JS_ROOT"]),
        "cwd": os.getcwd(),
        "session": os.getsid(0) == os.getpid(),
        "parent": os.getppid(),
    }]
"""

# Runs a parallel torch op on the worker's intra-op pool; reports the pool's size.
PARALLEL = """
import os
import torch


def handle(data, context):
    if data is None:
        return None
    a = torch.randn(1200, 1200)
    total = float((a @ a).sum())  # OpenMP/MKL pool of torch.get_num_threads() threads
    torch.ones(4_000_000).add_(1).sum()
    return [{
        "threads": torch.get_num_threads(),
        "tasks": len(os.listdir("/proc/self/task")),
        "finite": total == total,
    }]
"""


# Says whether transformers' model code was imported before its module was.
LM_PROBE = """
import sys

WARM = "transformers.modeling_utils" in sys.modules


def handle(data, context):
    if data is None:
        return None
    return [{"warm": WARM}]
"""


class FactoryProcess:
    """One factory process and the test's end of its control socket."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        argv = [sys.executable, "-m", "jupyter_serve.worker.factory", "--fd", str(child.fileno())]
        self.process = subprocess.Popen(
            argv,
            pass_fds=[child.fileno()],
            stderr=self.stderr,
            env={**os.environ, "PYTHONPATH": PACKAGE_ROOT, **(env or {})},
            start_new_session=True,
        )
        child.close()
        parent.settimeout(SAFETY_TIMEOUT)
        self.control = parent
        self.exits: dict[int, int] = {}

    def next_frame(self) -> Frame:
        data, fds, _, _ = socket.recv_fds(self.control, 65536, 1)
        assert (data, fds) != (b"", []), f"the factory hung up:\n{self.errors()}"
        frame = decode_packet(data)
        if "exited" in frame.header:
            self.exits[frame.header["exited"]] = frame.header["code"]
        return frame

    def answer_to(self, request_id: int) -> Frame:
        """The reply to fork request `request_id` (exit reports on the way are recorded)."""
        while (frame := self.next_frame()).header.get("id") != request_id:
            pass
        return frame

    def exit_of(self, pid: int) -> int:
        while pid not in self.exits:
            self.next_frame()
        return self.exits.pop(pid)

    def fork(self, request_id: int = 1, handler: str | None = None) -> ForkedWorker:
        ours, theirs = socket.socketpair()
        out_read, out_write = os.pipe()
        named = {} if handler is None else {"handler": handler}
        message = encode(Frame(Kind.FORK, {"id": request_id, **named}))
        socket.send_fds(self.control, [message], [theirs.fileno(), out_write, out_write])
        theirs.close()
        os.close(out_write)
        answer = self.answer_to(request_id)
        assert answer.kind is Kind.RESULT, answer.header
        worker = ForkedWorker(answer.header["pid"], ours, os.fdopen(out_read, "rb"))
        worker.answer = answer.header
        return worker

    def errors(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def close(self) -> int:
        self.control.close()
        try:
            return self.process.wait(timeout=SAFETY_TIMEOUT)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.stderr.close()


class ForkedWorker(WorkerConnection):
    """A worker the factory forked: its pid, its socket and its output (stdout + stderr)."""

    def __init__(self, pid: int, sock: socket.socket, output: IO[bytes]) -> None:
        self.pid, self.sock, self.output = pid, sock, output
        self.answer: dict[str, object] = {}  # the factory's answer to its fork request
        sock.settimeout(SAFETY_TIMEOUT)

    def send(self, frame: Frame) -> None:
        self.sock.sendall(encode(frame))

    def receive_results(self) -> list[InferenceResult]:
        reply = read_frame_sync(self.sock)
        assert reply is not None
        assert reply.kind is Kind.RESULT, reply.header
        return decode_results(reply)

    def close(self) -> str:
        """Hang up; the worker's whole output once it exited."""
        self.sock.close()
        with self.output:
            return self.output.read().decode(errors="replace")


@pytest.fixture
def factory() -> Iterator[FactoryProcess]:
    started = FactoryProcess()
    try:
        yield started
    finally:
        started.close()


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_the_factory_says_hello_with_torch_imported_and_a_single_thread(
    factory: FactoryProcess,
) -> None:
    hello = factory.next_frame()
    assert (hello.kind, hello.header["message"]) == (Kind.RESULT, "factory")
    assert (hello.header["pid"], hello.header["threads"]) == (factory.process.pid, 1)
    assert {"torch", "numpy", "jupyter_serve"} <= set(hello.header["modules"])
    assert threads_of(factory.process.pid) == 1  # numpy's OpenBLAS pool stopped too
    assert factory.close() == 0  # EOF on its socket ends it


def test_a_forked_worker_loads_with_the_settings_of_its_load_request(tmp_path: Path) -> None:
    factory = FactoryProcess(env={"JS_FACTORY_GONE": "in the factory's environment"})
    factory.next_frame()  # hello
    deps = write_model(tmp_path / "deps", {"factory_dep.py": "VALUE = 'from deps'\n"})
    folder = write_model(tmp_path / "probe", {"probe.py": SETTINGS_PROBE})
    worker = factory.fork()
    changes = {
        "JS_FACTORY_SET": "yes", "JS_FACTORY_GONE": None,
        "JS_DEPS": str(deps), "JS_ROOT": PACKAGE_ROOT,
    }  # fmt: skip
    loaded = worker.load(folder, "probe", sys_path=[str(deps)], env=changes, torch_threads=3)
    assert loaded.kind is Kind.RESULT, loaded.header
    [answer] = worker.json_bodies(request())
    output = worker.close()
    assert answer["deps_at"] > answer["package_at"]  # where PYTHONPATH would have put it
    assert {k: answer[k] for k in ("dep", "torch_was_warm", "threads", "set", "gone")} == {
        "dep": "from deps", "torch_was_warm": True, "threads": 3, "set": "yes", "gone": None,
    }  # fmt: skip
    assert (answer["cwd"], answer["session"], answer["parent"]) == (
        str(folder), True, factory.process.pid
    )  # fmt: skip
    assert "probe handled a batch" in output  # the handler's prints reach the server's pipe
    assert factory.exit_of(worker.pid) == 0  # EOF: the worker's own exit code, reported
    assert factory.close() == 0


def test_forked_workers_run_torch_on_several_intra_op_threads_side_by_side(
    factory: FactoryProcess, tmp_path: Path
) -> None:
    factory.next_frame()
    folder = write_model(tmp_path / "parallel", {"parallel.py": PARALLEL})
    workers = [factory.fork(request_id) for request_id in (1, 2)]
    for worker in workers:
        assert worker.load(folder, "parallel", torch_threads=3).kind is Kind.RESULT
    for worker in workers:  # both send before either reads: they run at the same time
        worker.send(encode_infer([request()]))
    answers = [json.loads(worker.receive_results()[0].body) for worker in workers]
    assert answers == [{"threads": 3, "tasks": answers[0]["tasks"], "finite": True}] * 2
    assert all(answer["tasks"] >= 3 for answer in answers)  # the pool started in the child
    assert threads_of(factory.process.pid) == 1  # and never in the factory
    for worker in workers:
        worker.close()


def test_the_first_fork_for_a_language_model_imports_transformers_for_it_and_later_workers(
    factory: FactoryProcess, tmp_path: Path
) -> None:
    pytest.importorskip("transformers")
    assert "transformers" not in factory.next_frame().header["modules"]
    folder = write_model(tmp_path / "probe", {"probe.py": LM_PROBE})
    other = factory.fork(1, handler="handler.py")  # not a handler with modules to import
    first = factory.fork(2, handler="causal_lm")
    second = factory.fork(3, handler="causal_lm")
    assert "modules" not in other.answer
    held = first.answer["modules"]
    assert isinstance(held, list)
    assert {"torch", "transformers", "tokenizers"} <= set(held)
    assert "modules" not in second.answer  # imported once, by the first
    assert threads_of(factory.process.pid) == 1  # the import's thread pool stopped too
    warm = []
    for worker in (other, first, second):
        assert worker.load(folder, "probe").kind is Kind.RESULT
        warm += [answer["warm"] for answer in worker.json_bodies(request())]
        worker.close()
    assert warm == [False, True, True]  # forked before the import, then after it


def test_killed_workers_are_reaped_and_reported_with_the_signal(factory: FactoryProcess) -> None:
    factory.next_frame()
    worker = factory.fork()
    os.kill(worker.pid, signal.SIGKILL)
    assert factory.exit_of(worker.pid) == -signal.SIGKILL
    worker.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(worker.pid, os.WNOHANG)  # not ours: the factory is its parent


def test_a_request_without_its_descriptors_is_refused_and_the_factory_goes_on(
    factory: FactoryProcess,
) -> None:
    factory.next_frame()
    socket.send_fds(factory.control, [encode(Frame(Kind.FORK, {"id": 7}))], [])
    refused = factory.answer_to(7)
    assert (refused.kind, refused.header["status"]) == (Kind.ERROR, 500)
    worker = factory.fork(8)
    assert worker.pid > 0
    worker.close()
    assert factory.exit_of(worker.pid) == 0


def test_a_factory_running_a_thread_refuses_to_fork() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    factory = Factory(theirs)  # in this process, where a thread is about to run
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    read, write = os.pipe()
    try:
        assert factory.fork(Frame(Kind.FORK, {"id": 3}), [read, write, os.dup(write)]) is None
        refused = decode_packet(ours.recv(65536))
    finally:
        stop.set()
        thread.join()
        factory.close()
        ours.close()
    assert (refused.kind, refused.header["id"]) == (Kind.ERROR, 3)
    assert "threads: not forking" in refused.header["message"]


def test_fd_is_required() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_serve.worker.factory"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "--fd" in done.stderr
