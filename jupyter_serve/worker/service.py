"""The worker's frame loop: load one model on `L`, then answer every `I` with one `R` or `E`.

`ModelService` holds the loaded handler and turns frames into frames, with no
socket (so it can be driven in-process); `serve(sock, service)` runs it over the
inherited connection. The `L` header (all keys but `model_dir` optional)::

    model_name, model_dir, handler ("" -> the manifest's), gpu_id, batch_size,
    limit_max_image_pixels, server_version, model_yaml_config,
    decode_input_request, sys_path, env, torch_threads, torch_burst_threads, model_metrics

`model_metrics` are the `model_metrics` declarations of the server's metrics_config
(`{"name", "unit", "dimensions", "type"}` each), which `context.metrics` holds
before the handler is imported, as TorchServe's worker does.

`sys_path`, `env` and `torch_threads` are what a worker launched for this
model would have got at launch; they are applied before the handler is
imported (see `warm`), which is what lets a worker forked from the factory serve it.
`torch_burst_threads` is what the handler may take for a short heavy pass (its context's
`torch_burst_threads`; jupyter_serve/server/pool/cores.py).

A loaded model answers ``R {"status": 200, "message": "loaded", "pid", "metrics"}``
(`metrics`: what the handler's `initialize` emitted); a failed
load answers `E` (500, or 507 out of memory) and `serve` returns 1. A batch
answers ``R`` with ``encode_results(results, metrics=[...], predict_ms=...)`` or,
when the whole batch failed, `E` (see `failures`). A request whose inputs cannot
be decoded gets its own 400 result and the others still run (see `inputs`):
nothing a request contains ends the worker. EOF returns 0; a malformed frame
raises `ProtocolError`.

A handler may stream (`streaming.send_intermediate_predict_response`): each call
writes an `S` frame through `ModelService.send_frame` while the batch runs, before
its `R` or `E`. `serve` points `send_frame` at the socket; without it (a service
driven in-process) streaming raises `StreamingUnavailable`.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from jupyter_serve.archive import read_manifest
from jupyter_serve.wire.protocol import (
    Frame,
    InferenceRequest,
    InferenceResult,
    Kind,
    ProtocolError,
    StreamChunk,
    decode_infer,
    encode_chunk,
    encode_results,
    read_frame_sync,
    write_frame_sync,
)
from jupyter_serve.worker.context import Context
from jupyter_serve.worker.failures import (
    Failure,
    format_traceback,
    load_failure,
    prediction_failure,
)
from jupyter_serve.worker.inputs import BatchInput, build_batch
from jupyter_serve.worker.kserve import expand
from jupyter_serve.worker.kserve_outputs import array_outputs
from jupyter_serve.worker.loader import (
    DEFAULT_BUILTIN_PACKAGE,
    HandleFunction,
    HandlerLoadError,
    load_handler,
)
from jupyter_serve.worker.metrics import MetricsCache
from jupyter_serve.worker.outputs import build_results
from jupyter_serve.worker.steps import STEP_CONTROLS, run_steps
from jupyter_serve.worker.warm import apply_settings, set_torch_threads

PREDICTION_METRIC = "PredictionTime"


@dataclass(frozen=True)
class LoadSpec:
    """The `L` frame's header, with TorchServe's defaults."""

    model_name: str
    model_dir: str
    handler: str = ""
    gpu_id: int | None = None
    batch_size: int = 1
    limit_max_image_pixels: bool = True
    server_version: str = ""
    model_yaml_config: dict[str, Any] = field(default_factory=dict)
    decode_input_request: bool = True
    sys_path: tuple[str, ...] = ()
    env: dict[str, str | None] = field(default_factory=dict)
    torch_threads: int | None = None
    torch_burst_threads: int | None = None  # for a short heavy pass (server/pool/cores.py)
    envelope: str = ""  # config.properties' service_envelope
    model_metrics: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> LoadSpec:
        try:
            gpu = header.get("gpu_id")
            return cls(
                model_name=str(header.get("model_name") or ""),
                model_dir=str(header["model_dir"]),
                handler=str(header.get("handler") or ""),
                gpu_id=None if gpu is None else int(gpu),
                batch_size=int(header.get("batch_size") or 1),
                limit_max_image_pixels=bool(header.get("limit_max_image_pixels", True)),
                server_version=str(header.get("server_version") or ""),
                model_yaml_config=dict(header.get("model_yaml_config") or {}),
                decode_input_request=bool(header.get("decode_input_request", True)),
                sys_path=tuple(str(entry) for entry in header.get("sys_path") or ()),
                env=_env(header.get("env") or {}),
                torch_threads=int(header.get("torch_threads") or 0) or None,
                torch_burst_threads=int(header.get("torch_burst_threads") or 0) or None,
                envelope=str(header.get("envelope") or ""),
                model_metrics=tuple(dict(item) for item in header.get("model_metrics") or ()),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"Bad load header: {exc!r}") from exc


@dataclass
class LoadedModel:
    """A model whose handler is initialized: everything a batch needs."""

    spec: LoadSpec
    manifest: dict[str, Any]
    metrics: MetricsCache
    handle: HandleFunction | None = None
    _context: Context | None = None

    def context(self) -> Context:
        """The model's one context, as TorchServe's worker has one for the handler's life:
        `initialize` gets it, and every batch is attached to it, so what a handler keeps on
        it (`context.cache`, `stopping_criteria`) lasts from call to call."""
        if self._context is None:
            self._context = self._new_context()
        return self._context

    def _new_context(self) -> Context:
        spec = self.spec
        return Context(
            spec.model_name,
            str(Path(spec.model_dir)),
            self.manifest,
            spec.batch_size,
            spec.gpu_id,
            spec.server_version,
            limit_max_image_pixels=spec.limit_max_image_pixels,
            metrics=self.metrics,
            model_yaml_config=spec.model_yaml_config,
            torch_burst_threads=spec.torch_burst_threads,
        )

    @property
    def handler(self) -> str:
        """The effective handler string: the load request's, else the manifest's."""
        return self.spec.handler or str(self.manifest.get("model", {}).get("handler") or "")


class ModelService:
    """One model's handler, answering load and inference frames."""

    def __init__(
        self,
        torch_threads: int | None = None,
        builtin_package: str = DEFAULT_BUILTIN_PACKAGE,
        chdir: bool = False,
    ) -> None:
        self.torch_threads = torch_threads
        self.builtin_package = builtin_package
        self.chdir = chdir
        self.model: LoadedModel | None = None
        self.send_frame: Callable[[Frame], None] | None = None

    def load(self, frame: Frame) -> Frame:
        """Answer an `L` frame: R(200) once the handler is initialized, else E."""
        if frame.kind is not Kind.LOAD or self.model is not None:
            raise ProtocolError(f"Expected one L frame first, got {frame.kind.value}")
        spec = LoadSpec.from_header(frame.header)
        try:
            self.model = self._load(spec)
        except Exception as exc:
            failure = _load_failure(spec, exc)
            print(failure.traceback, file=sys.stderr, flush=True)
            return failure.frame()
        emitted = self.model.metrics.drain()
        header = {"status": 200, "message": "loaded", "pid": os.getpid(), "metrics": emitted}
        return Frame(Kind.RESULT, header)

    def _load(self, spec: LoadSpec) -> LoadedModel:
        threads = spec.torch_threads or self.torch_threads
        apply_settings(spec.sys_path, spec.env, threads)
        manifest = read_manifest(spec.model_dir).to_dict()
        model = LoadedModel(spec, manifest, MetricsCache(spec.model_name))
        model.metrics.declare(spec.model_metrics)
        if not model.handler:
            raise HandlerLoadError(f"No handler given and none in the manifest of {spec.model_dir}")
        if self.chdir:  # TorchServe runs its workers in the model directory.
            os.chdir(spec.model_dir)
        _, model.handle = load_handler(
            model.handler, spec.model_dir, model.context(), self.builtin_package
        )
        if spec.envelope:  # TorchServe wraps the entry point when service_envelope is set
            model.handle = enveloped(spec.envelope, model.handle)
        set_torch_threads(threads)  # the handler may have imported torch just now
        return model

    def infer(self, frame: Frame) -> Frame:
        """Answer an `I` frame with R (per-request results) or E (the batch failed)."""
        requests, command = self._batch(frame)
        assert self.model is not None
        return run_batch(self.model, requests, command, self.send_frame)

    def steps(self, frame: Frame, sock: socket.socket) -> Frame | None:
        """Run the continuous batch an `I` "steps" frame starts, stepping on its own over
        `sock` (worker/steps.py) until the server ends it: its closing R (None: the server
        closed the socket meanwhile)."""
        requests, _ = self._batch(frame)
        assert self.model is not None
        step = partial(run_batch, self.model, command="predict", send_frame=self.send_frame)
        capacity = frame.header.get("capacity")
        if not isinstance(capacity, int) or capacity < 1:
            capacity = max(len(requests), self.model.spec.batch_size, 1)
        return run_steps(sock, requests, step, capacity)

    def _batch(self, frame: Frame) -> tuple[list[InferenceRequest], str]:
        if frame.kind is not Kind.INFER or self.model is None:
            raise ProtocolError(f"Expected an I frame after a load, got {frame.kind.value}")
        try:
            return decode_infer(frame)
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"Bad inference header: {exc!r}") from exc


def enveloped(name: str, handle: HandleFunction) -> HandleFunction:
    """`handle` wrapped in TorchServe's request envelope `name` (json, body, kserve, ...)."""
    from jupyter_serve.handlers.envelopes import ENVELOPES

    if name not in ENVELOPES:
        known = ", ".join(sorted(ENVELOPES))
        raise HandlerLoadError(f"Unknown service_envelope {name!r} (TorchServe has {known})")
    return ENVELOPES[name](handle).handle


def run_batch(
    model: LoadedModel,
    requests: list[InferenceRequest],
    command: str,
    send_frame: Callable[[Frame], None] | None = None,
) -> Frame:
    """Call the handler on one batch: an R frame with results and metrics, or an E frame.

    Requests whose inputs cannot be decoded never reach the handler: each gets its
    own 400 in the R frame (see `inputs`). A KServe request the server forwarded is
    opened into its rows first, and its rows' results folded back into its answer
    (`kserve`). Intermediate results the handler streams
    go out through `send_frame` as S frames while it runs.
    """
    if model.handle is None:
        raise ProtocolError("The model is not loaded")
    forwarded = expand(requests)  # KServe bodies the server forwarded unopened (kserve.py)
    batch = build_batch(forwarded.requests, command, model.spec.decode_input_request)
    if not batch.request_ids:  # every request was rejected: nothing for the handler
        answers = forwarded.collect(batch.answers([]))
        return encode_results(answers, metrics=model.metrics.drain(), predict_ms=0.0)
    try:
        results, predict_ms = _handle(model.handle, model.context(), batch, send_frame,
                                      forwarded.opened_ids)  # fmt: skip
    except Exception as exc:
        model.metrics.drain()
        failure = prediction_failure(exc)
        print(failure.traceback, file=sys.stderr, flush=True)
        if not batch.rejected and not forwarded.answered:
            return failure.frame()
        failed = [failure.result(r) for r in batch.request_ids]
        return encode_results(forwarded.collect(batch.answers(failed)))
    model.metrics.add_time(PREDICTION_METRIC, round(predict_ms, 2))  # as ts/service.py
    answers = forwarded.collect(batch.answers(results))
    return encode_results(answers, metrics=model.metrics.drain(), predict_ms=predict_ms)


def _handle(
    handle: HandleFunction,
    context: Context,
    batch: BatchInput,
    send_frame: Callable[[Frame], None] | None,
    unstreamed: frozenset[str] = frozenset(),
) -> tuple[list[InferenceResult], float]:
    """The handler's results for the batch's accepted requests, and its time in ms; what it
    streams to the requests of `unstreamed` (KServe envelopes: one answer each) is dropped,
    and their array outputs become tensors (`kserve_outputs`)."""
    context.with_requests(batch.request_ids, batch.headers)
    if send_frame is not None:
        context.chunk_sink = partial(_send_chunk, send_frame, unstreamed)
    context.metrics.begin_batch(context.request_ids)
    started = time.perf_counter()
    try:
        outputs = handle(batch.data, context)
        predict_ms = (time.perf_counter() - started) * 1000
        outputs = array_outputs(outputs, context, unstreamed)  # KServe rows' arrays as tensors
        return build_results(outputs, context), predict_ms
    finally:
        context.chunk_sink = None  # a handler thread outliving the batch must not stream


def _env(changes: dict[str, Any]) -> dict[str, str | None]:
    return {str(name): None if value is None else str(value) for name, value in changes.items()}


def _send_chunk(
    send_frame: Callable[[Frame], None], unstreamed: frozenset[str], chunk: StreamChunk
) -> None:
    if unstreamed and chunk.status == 200:  # a failing status still fails the batch
        kept = [result for result in chunk.results if result.request_id not in unstreamed]
        if not kept:
            return
        chunk = StreamChunk(kept, chunk.status, chunk.message)
    send_frame(encode_chunk(chunk))


def _load_failure(spec: LoadSpec, exc: Exception) -> Failure:
    summary = f"Loading model {spec.model_name!r} failed: {exc}".splitlines()[0]
    details = getattr(exc, "details", "") or format_traceback(exc)
    return load_failure(exc, summary, details)


def serve(sock: socket.socket, service: ModelService) -> int:
    """Run `service` over `sock` until EOF (0) or a failed load (1)."""
    service.send_frame = partial(write_frame_sync, sock)
    frame = read_frame_sync(sock)
    if frame is None:
        return 0
    write_frame_sync(sock, reply := service.load(frame))
    if reply.kind is Kind.ERROR:
        return 1
    while (frame := read_frame_sync(sock)) is not None:
        command = frame.header.get("command")
        if command in STEP_CONTROLS:
            continue  # late for a run that ended (worker/steps.py): nothing to answer
        if command != "steps":
            write_frame_sync(sock, service.infer(frame))
        elif (closing := service.steps(frame, sock)) is not None:
            write_frame_sync(sock, closing)
        else:
            return 0  # the server closed the socket during the run
    return 0
