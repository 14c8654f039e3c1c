"""A stand-in worker for pool tests: speaks jupyter_serve.wire.protocol, loads nothing, starts fast.

Run as `python tests/fake_worker.py --fd N [--torch-threads K]`, as the pool runs
`python -m jupyter_serve.worker`. Standard library plus jupyter_serve.wire.protocol only.

On start it prints `CUDA_VISIBLE_DEVICES=<value or unset>` to stdout and
`fake worker stderr` to stderr. `L` is driven by `model_yaml_config["fake"]`:
`load_sleep` (seconds before answering), `load_print` (a line for stderr),
`load_exit` (exit with that code, no answer), `load_fail` (answer `E` with that
status), `ignore_sigterm` (true: SIGTERM does nothing).

Each `I` batch echoes every request's first parameter (or its id) with headers
`x-batch` (the batch's ids, comma-joined), `x-command` and `x-pid`, and reports
one metric. Request headers steer the batch: `x-sleep` (seconds), `x-print`
(a line for stdout), `x-fifo` (wait until that FIFO is written and closed),
`x-exit` (exit code, no answer), `x-kill` (SIGKILL itself), `x-fail` (answer `E`
with that status), `x-info` (body = JSON of `argv`, `load` (the L header) or
`env:NAME`), `x-stream` (send that many `S` frames first, one result per request
of the batch with body `<id>:<n>`; `x-stream-status` sets their batch status).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from typing import Any

from jupyter_serve.wire import protocol
from jupyter_serve.wire.protocol import Frame, InferenceRequest, InferenceResult, Kind


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--torch-threads", type=int, default=None)
    args = parser.parse_args()
    sock = socket.socket(fileno=args.fd)
    print(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}", flush=True)
    print("fake worker stderr", file=sys.stderr, flush=True)
    load = protocol.read_frame_sync(sock)
    if load is None:
        return 0
    assert load.kind is Kind.LOAD
    answer_load(sock, load.header)
    while True:
        frame = protocol.read_frame_sync(sock)
        if frame is None:
            return 0
        requests, command = protocol.decode_infer(frame)
        stream_chunks(sock, requests)
        protocol.write_frame_sync(sock, answer_batch(requests, command, load.header))


def answer_load(sock: socket.socket, header: dict[str, Any]) -> None:
    fake = header.get("model_yaml_config", {}).get("fake", {})
    if fake.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "load_print" in fake:
        print(fake["load_print"], file=sys.stderr, flush=True)
    time.sleep(float(fake.get("load_sleep", 0)))
    if "load_exit" in fake:
        os._exit(int(fake["load_exit"]))
    if "load_fail" in fake:
        error = {
            "status": int(fake["load_fail"]),
            "type": "InternalServerException",
            "message": "fake load failure",
            "traceback": "Traceback (most recent call last):\n  fake\nMemoryError",
        }
        protocol.write_frame_sync(sock, Frame(Kind.ERROR, error))
        sys.exit(1)
    reply = {"status": 200, "message": "loaded", "pid": os.getpid()}
    protocol.write_frame_sync(sock, Frame(Kind.RESULT, reply))


def stream_chunks(sock: socket.socket, requests: list[InferenceRequest]) -> None:
    count = max((int(r.headers.get("x-stream", 0)) for r in requests), default=0)
    status = max((int(r.headers.get("x-stream-status", 200)) for r in requests), default=200)
    for n in range(count):
        results = [
            InferenceResult(r.request_id, body=f"{r.request_id}:{n}".encode()) for r in requests
        ]
        chunk = protocol.StreamChunk(
            results, status, "fake stream failure" if status != 200 else ""
        )
        protocol.write_frame_sync(sock, protocol.encode_chunk(chunk))


def answer_batch(requests: list[InferenceRequest], command: str, load: dict[str, Any]) -> Frame:
    headers = [r.headers for r in requests]
    for h in headers:
        if "x-print" in h:
            print(h["x-print"], flush=True)
    time.sleep(max((float(h.get("x-sleep", 0)) for h in headers), default=0.0))
    for h in headers:
        if "x-fifo" in h:  # block until the test opens the FIFO for writing and closes it
            with open(h["x-fifo"], "rb") as fifo:
                fifo.read()
    for h in headers:
        if "x-kill" in h:
            os.kill(os.getpid(), signal.SIGKILL)
        if "x-exit" in h:
            os._exit(int(h["x-exit"]))
        if "x-fail" in h:
            error = {
                "status": int(h["x-fail"]),
                "type": "PredictionException",
                "message": "fake prediction failure",
                "traceback": "Traceback: fake",
            }
            return Frame(Kind.ERROR, error)
    batch = ",".join(r.request_id for r in requests)
    results = [
        InferenceResult(
            request_id=r.request_id,
            body=body_for(r, load),
            content_type="application/octet-stream",
            headers={"x-batch": batch, "x-command": command, "x-pid": str(os.getpid())},
        )
        for r in requests
    ]
    metric = {
        "name": "FakeBatchSize",
        "value": len(requests),
        "unit": "count",
        "dimensions": {"ModelName": load["model_name"]},
        "type": "gauge",
        "request_id": None,
    }
    return protocol.encode_results(results, metrics=[metric], predict_ms=1.5)


def body_for(request: InferenceRequest, load: dict[str, Any]) -> bytes:
    info = request.headers.get("x-info")
    if info == "argv":
        return json.dumps(sys.argv).encode()
    if info == "load":
        return json.dumps(load).encode()
    if info and info.startswith("env:"):
        return json.dumps(os.environ.get(info[4:])).encode()
    if request.parameters:
        return request.parameters[0].value
    return request.request_id.encode()


if __name__ == "__main__":
    sys.exit(main())
