"""The `L` frame a worker loads its model with, and what the worker's answer to it means.

`load_header` is everything a worker needs before it imports the handler: the model
version (jupyter_serve/server/models.py's `ModelSpec`), its GPU as the worker sees it, the
environment changes and sys.path entries a fresh process would have been launched with,
and its torch threads (steady, and for a short heavy pass: server/pool/cores.py).
`loaded_metrics` reads the answer: `R(200)` gives the metrics the
handler's `initialize` emitted; an `E` frame (the handler failed, 507 for out of memory)
or any other answer is a `WorkerLoadError`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from jupyter_serve._version import __version__
from jupyter_serve.server.pool.errors import WorkerLoadError
from jupyter_serve.wire.protocol import Frame, Kind

if TYPE_CHECKING:
    from jupyter_serve.server.models import ModelSpec

__all__ = ["UnexpectedAnswer", "load_header", "loaded_metrics"]


class UnexpectedAnswer(WorkerLoadError):
    """The worker answered the load with neither R(200) nor E: it is not to be trusted."""


def load_header(
    spec: ModelSpec, gpu_id: int | None, env: dict[str, str | None], torch_threads: int | None,
    burst_threads: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The `L` frame's header (module docstring)."""
    return {
        "model_name": spec.model_name,
        "model_dir": os.path.abspath(spec.model_dir),  # workers start elsewhere
        "handler": spec.handler,
        "gpu_id": None if gpu_id is None else 0,  # CUDA_VISIBLE_DEVICES: its cuda:0
        "batch_size": spec.batch_size,
        "limit_max_image_pixels": spec.limit_max_image_pixels,
        "server_version": __version__,
        "model_yaml_config": spec.model_yaml_config,
        "decode_input_request": spec.decode_input_request,
        "envelope": spec.envelope,
        "sys_path": [os.path.abspath(path) for path in spec.python_path],
        "env": env,
        "torch_threads": torch_threads,
        "torch_burst_threads": burst_threads or torch_threads,
        "model_metrics": list(spec.model_metrics),
    }


def loaded_metrics(reply: Frame, worker_id: str) -> list[dict[str, Any]]:
    """The metrics of a successful load; a failed or unexpected answer raises.

    Raises:
        WorkerLoadError: an E frame (the handler's message and traceback).
        UnexpectedAnswer: anything but R(200) or E.
    """
    header = reply.header
    if reply.kind is Kind.ERROR:
        raise WorkerLoadError(
            str(header.get("message") or "Worker failed to load the model"),
            status_code=507 if header.get("status") == 507 else 500,
            traceback=str(header.get("traceback") or ""),
        )
    if reply.kind is not Kind.RESULT or header.get("status") != 200:
        raise UnexpectedAnswer(f"Worker {worker_id} answered the load request with {header!r}")
    return list(header.get("metrics") or [])
