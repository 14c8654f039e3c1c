"""The worker factory: one warm interpreter that forks new workers (a fork server, "zygote").

``python -m jupyter_serve.worker.factory --fd N``: `N` is an inherited AF_UNIX
SOCK_SEQPACKET socket carrying one jupyter_serve.wire.protocol frame per packet (kinds
F, R and E: see the protocol's docstring). The server side is
jupyter_serve.server.pool.factory.

The factory imports torch and the handler runtime (`warm.warm_up`) and nothing
else. It runs no torch op, so no OpenMP or MKL thread pool exists; it never asks
torch about CUDA, so no CUDA driver or context is initialised; and it starts no
thread. numpy's OpenBLAS starts a pool when torch imports numpy: one throwaway
fork lets OpenBLAS's own `pthread_atfork` handler shut it down (a process that
later calls BLAS restarts it, as a forked worker does). Its objects are moved to
the garbage collector's permanent generation (`gc.freeze`), so that collections in
a forked worker do not write to, and so copy, the pages they share with the
factory, and the library pages only the import used are handed back to the kernel
(`pageout.release_file_pages`). The factory then counts its threads and says hello::

    R {"status": 200, "message": "factory", "pid", "modules", "threads"}

The server forks from it only when `threads` is 1. Each `F {"id", "handler"}` packet
brings three descriptors: the worker's end of its socket and the write ends of its
stdout and stderr pipes. `handler` (optional) names the worker's handler: on the
first fork for a handler of `warm.HANDLER_MODULES`, the factory imports that
handler's modules and settles as after its warm-up (`settle`), so that this worker
and every later one share them. The factory forks; the child starts its own session,
puts the pipes on fds 1 and 2, reseeds numpy's global generator (a fresh
interpreter seeds its own) and runs `__main__.run`, exactly what ``python -m
jupyter_serve.worker --fd N`` runs: it waits for its `L` frame, which carries its
environment, `sys.path` entries and torch threads (`warm.apply_settings`). The
factory answers `R {"id", "pid"}`, with `"modules"` (all it holds now) after a
handler's import (`E {"id", ...}` if the fork failed), reaps its children and
reports each exit as `R {"exited": pid, "code"}`. EOF on the control socket ends the
factory once its workers have exited (their sockets close too).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import selectors
import signal
import socket
import sys
import warnings
from collections.abc import Sequence

from jupyter_serve.wire.protocol import Frame, Kind, ProtocolError, decode_packet, encode
from jupyter_serve.worker import warm
from jupyter_serve.worker.pageout import release_file_pages
from jupyter_serve.worker.startpath import drop_start_entry

MAX_PACKET = 64 * 1024
FDS_PER_FORK = 3  # the worker's socket, its stdout, its stderr


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jupyter_serve.worker.factory", description=__doc__)
    p.add_argument("--fd", type=int, required=True, help="inherited SOCK_SEQPACKET socket")
    return p


def main(argv: list[str] | None = None) -> int:
    drop_start_entry()  # before the warm-up imports anything
    args = parser().parse_args(argv)
    control = socket.socket(fileno=args.fd)
    modules = warm.warm_up()
    settle()
    hello = {"status": 200, "message": "factory", "pid": os.getpid()}
    try:
        send(control, Frame(Kind.RESULT, {**hello, "modules": modules, "threads": thread_count()}))
    except OSError:
        return 0  # the server hung up while we warmed up: nobody to fork for
    return Factory(control).serve()


def settle() -> None:
    """After an import: leave what it made to the workers to share, and no thread running."""
    gc.collect()
    gc.freeze()  # a forked worker's collections then leave the factory's objects (and pages) alone
    release_file_pages()  # the import-time library pages: workers fault in what they use
    if thread_count() > 1:
        _quiesce()


def thread_count() -> int:
    """Threads of this process, as the kernel counts them (Python's and native ones)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def _quiesce() -> None:
    """One throwaway fork: libraries with fork handlers (OpenBLAS) stop their pools."""
    with warnings.catch_warnings():  # Python 3.12+ warns of the very threads this stops
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def send(sock: socket.socket, frame: Frame, fds: Sequence[int] = ()) -> None:
    socket.send_fds(sock, [encode(frame)], list(fds))


def receive(sock: socket.socket) -> tuple[Frame, list[int]] | None:
    """The next packet's frame and descriptors; None at EOF.

    Raises:
        ProtocolError: a truncated or malformed packet (its descriptors are closed).
    """
    data, fds, flags, _ = socket.recv_fds(sock, MAX_PACKET, FDS_PER_FORK)
    if not data and not fds:
        return None
    try:
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise ProtocolError("Truncated packet")
        return decode_packet(data), fds
    except ProtocolError:
        _close(fds)
        raise


class Factory:
    """The fork loop: fork on every `F`, report every child's exit, until EOF."""

    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.warmed: set[str] = set()  # handlers whose modules were imported (`_warm_for`)
        self.wake_read, self.wake_write = os.pipe()
        for fd in (self.wake_read, self.wake_write):
            os.set_blocking(fd, False)
        self.selector = selectors.DefaultSelector()

    def serve(self) -> int:
        """Run until the server hangs up (0); in a forked child, its worker's exit status."""
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through the pipe
        signal.set_wakeup_fd(self.wake_write, warn_on_full_buffer=False)
        self.selector.register(self.control, selectors.EVENT_READ)
        self.selector.register(self.wake_read, selectors.EVENT_READ)
        while True:
            for key, _ in self.selector.select():
                if key.fileobj is not self.control:
                    self._drain_wakeups()
                    self._reap()
                    continue
                try:
                    packet = receive(self.control)
                except ProtocolError as exc:
                    print(f"jupyter_serve factory: bad request: {exc}", file=sys.stderr)
                    continue
                except OSError:
                    packet = None  # the connection broke: as good as EOF
                if packet is None:
                    self._outlive_children()
                    return 0
                status = self.fork(*packet)
                if status is not None:
                    return status  # this is the child, and its worker has ended

    def fork(self, frame: Frame, fds: list[int]) -> int | None:
        """Fork a worker for `frame`; in the child, run it and return its exit status."""
        request = frame.header.get("id")
        if frame.kind is not Kind.FORK or len(fds) != FDS_PER_FORK:
            _close(fds)
            self._answer_error(request, f"Expected F with {FDS_PER_FORK} descriptors")
            return None
        answer: dict[str, object] = {"id": request}
        if self._warm_for(frame.header.get("handler")):
            answer["modules"] = warm.imported_packages()
        if (threads := thread_count()) > 1:  # never fork a thread's locks into a worker
            _close(fds)
            self._answer_error(request, f"The factory runs {threads} threads: not forking")
            return None
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # nothing buffered here may reach the child's pipes
        try:
            pid = os.fork()
        except OSError as exc:
            _close(fds)
            self._answer_error(request, f"fork failed: {exc}")
            return None
        if pid == 0:
            return self._become_worker(fds)
        _close(fds)
        self._tell(Frame(Kind.RESULT, {**answer, "pid": pid}))
        return None

    def _warm_for(self, handler: object) -> bool:
        """Import what `handler` needs (`warm.HANDLER_MODULES`) on its first fork; True if
        that imported anything."""
        if not isinstance(handler, str) or handler in self.warmed:
            return False
        self.warmed.add(handler)
        if not warm.warm_up_handler(handler):
            return False
        settle()
        return True

    def _answer_error(self, request: object, message: str) -> None:
        self._tell(Frame(Kind.ERROR, {"id": request, "status": 500, "message": message}))

    def _tell(self, frame: Frame) -> None:
        with contextlib.suppress(OSError):  # the server is gone: the next read sees EOF
            send(self.control, frame)

    def _become_worker(self, fds: list[int]) -> int:
        """In the forked child: drop the factory's state, then serve as a fresh worker does."""
        os.setsid()  # its own process group, as a launched worker (pool.process)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.close()
        sock, out, err = fds
        os.dup2(out, 1)
        os.dup2(err, 2)
        _close([out, err])
        _reseed_numpy()
        from jupyter_serve.worker.__main__ import run

        return run(sock)

    def close(self) -> None:
        """Close the control socket, the selector and the wake-up pipe."""
        self.selector.close()
        self.control.close()
        _close([self.wake_read, self.wake_write])

    def _outlive_children(self) -> None:
        """After the server hung up, wait for the workers (whose sockets closed too) to
        exit, so that they are reaped here rather than left to init."""
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_read, 512):
                pass

    def _reap(self) -> None:
        """Report every child that has exited since the last call."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            self._tell(Frame(Kind.RESULT, {"exited": pid, "code": code}))


def _reseed_numpy() -> None:
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _close(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
