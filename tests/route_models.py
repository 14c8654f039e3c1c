"""Shared by the REST route tests: probe handlers, built into a .mar and registered for real.

`PROBE` echoes its input and, driven by the `X-Mode` request header, shows what
it received, sets a status, content type or headers, or fails the way a
TorchServe handler can. `STREAM` is TorchServe's `echo_stream`: three
intermediate "hello " chunks and a final "hello world " (its comment lists the
request headers that steer it). No torch: a worker serving either starts in
well under a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

from jupyter_serve.archive import ArchiveSpec, build_mar
from jupyter_serve.server.models import RegisterParams
from jupyter_serve.server.registry import ModelRegistry

PROBE = """
import time

from ts.utils.util import PredictionException


def _seen(row, context, idx):
    return {
        "keys": sorted(row),
        "types": {key: type(value).__name__ for key, value in row.items()},
        "explain": context.get_request_header(idx, "explain"),
        "url_path": context.get_request_header(idx, "url_path"),
        "batch": len(context.request_ids),
        "row": {k: v for k, v in row.items() if not isinstance(v, (bytes, bytearray))},
    }


def handle(data, context):
    if not data:
        return None
    out = []
    for idx, row in enumerate(data):
        mode = context.get_request_header(idx, "X-Mode") or ""
        if mode == "raise":
            raise RuntimeError("boom")
        if mode == "sleep":
            time.sleep(0.5)
        if mode == "oom":
            raise MemoryError("no room")
        if mode == "custom":
            raise PredictionException("custom failure", 599)
        if mode == "status":
            context.set_response_status(507, "", idx)
            out.append("Invalid response")
        elif mode == "headers":
            context.set_response_content_type(idx, "text/plain")
            context.set_response_header(idx, "dummy", "1")
            out.append("with headers")
        elif mode == "seen":
            out.append(_seen(row, context, idx))
        else:
            value = row.get("data") or row.get("body")
            out.append(bytes(value) if isinstance(value, (bytes, bytearray)) else value)
    return out
"""


STREAM = """
# echo_stream: 3 intermediate chunks, then the final one. "X-Stream: no" answers at once;
# "X-Gate: FIFO" blocks after the first chunk until the FIFO is written and closed;
# "X-Mode: raise" fails the batch after the intermediate chunks.
from ts.handler_utils.utils import send_intermediate_predict_response


def handle(data, context):
    if not data:
        return None

    def header(key):
        return context.get_request_header(0, key)

    if header("X-Stream") == "no":
        return ["hello world " for _ in data]
    for idx in range(len(data)):
        context.set_response_content_type(idx, "text/plain")
    for n in range(3):
        send_intermediate_predict_response(
            ["hello " for _ in data], context.request_ids, "Intermediate Prediction success",
            200, context,
        )
        if n == 0 and header("X-Gate"):
            with open(header("X-Gate"), "rb") as gate:
                gate.read()
    if header("X-Mode") == "raise":
        raise RuntimeError("failed mid-stream")
    return ["hello world " for _ in data]
"""


def serve_state(serverapp: Any) -> tuple[ModelRegistry, Path]:
    """The running server's registry and model store."""
    settings = serverapp.web_app.settings
    return settings["serve_registry"], Path(settings["serve_app"].model_store)


def server_config(tmp_path: Path, **serve: Any) -> dict[str, Any]:
    """A `jp_server_config` with jupyter_serve on, a private workdir, no snapshots, and
    fresh workers (no worker factory)."""
    settings = {"workdir": str(tmp_path / "work"), "snapshots": False, "fork_workers": False}
    settings.update(serve)
    return {"ServerApp": {"jpserver_extensions": {"jupyter_serve": True}}, "ServeApp": settings}


BROWSER_ORIGIN = "https://notebooks.example"


def cors_server_config(tmp_path: Path) -> dict[str, Any]:
    """`server_config` with jupyter_server answering CORS for `BROWSER_ORIGIN`."""
    config = server_config(tmp_path)
    config["ServerApp"]["allow_origin"] = BROWSER_ORIGIN
    return config


async def register(
    serverapp: Any,
    name: str = "probe",
    version: str = "1.0",
    workers: int = 1,
    source: str = PROBE,
    model_config: str | None = None,
    **params: Any,
) -> None:
    """Build `source` (`PROBE`) as `<name>-<version>.mar` in the model store and register it
    (`model_config`: the text of a model-config.yaml to archive with it)."""
    registry, store = serve_state(serverapp)
    src = store.parent / f"src-{name}-{version}"
    src.mkdir(parents=True, exist_ok=True)
    (src / "probe.py").write_text(source)
    config_file = None
    if model_config is not None:
        (src / "model-config.yaml").write_text(model_config)
        config_file = str(src / "model-config.yaml")
    spec = ArchiveSpec(
        model_name=name, handler=str(src / "probe.py"), version=version, export_path=str(store),
        config_file=config_file,
    )  # fmt: skip
    mar = build_mar(spec)
    target = mar.with_name(f"{name}-{version}.mar")
    mar.rename(target)
    values = {"response_timeout": 30, "startup_timeout": 30, "initial_workers": workers, **params}
    await registry.register(target.name, RegisterParams(**values))


def gate(tmp_path: Path) -> Path:
    """A FIFO a handler given `X-Gate: <its path>` blocks on (STREAM, after its first chunk)."""
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    return fifo


async def release(fifo: Path) -> None:
    """Let the handler go on (opening the FIFO for writing waits for its reader)."""
    await asyncio.to_thread(lambda: os.close(os.open(fifo, os.O_WRONLY)))


async def release_if_waiting(fifo: Path) -> None:
    """Let a handler waiting at `fifo` go on; no-op when nobody waits there (cleanup)."""

    def open_and_close() -> None:
        with contextlib.suppress(OSError):  # ENXIO: no reader, nobody to release
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    await asyncio.to_thread(open_and_close)
