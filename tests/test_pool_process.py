"""The worker socket's ends: sized so large batches leave in few sends."""

from __future__ import annotations

import socket
from pathlib import Path

from jupyter_serve.server.pool.process import SOCKET_BUFFER_BYTES, worker_socketpair


def test_both_ends_may_queue_a_large_batch() -> None:
    cap = int(Path("/proc/sys/net/core/wmem_max").read_text())
    parent, child = worker_socketpair()
    with parent, child:
        for end in (parent, child):
            # Linux reports twice the size set (its bookkeeping share), capped by wmem_max
            expected = 2 * min(SOCKET_BUFFER_BYTES, cap)
            assert end.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == expected
        payload = b"x" * min(SOCKET_BUFFER_BYTES // 2, cap // 2)
        parent.setblocking(False)
        assert parent.send(payload) == len(payload)  # one send, no reader yet
