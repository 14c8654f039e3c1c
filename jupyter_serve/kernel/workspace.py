"""Handler work folders in the kernel: what `%%handler` writes and `%serve try` runs.

A work folder is laid out like an extracted archive, so the very same code path
serves it in a worker, in the kernel, or packed into a `.mar`::

    <root>/<name>/handler.py            the cell
    <root>/<name>/<model file, weights, extra files>   copied in
    <root>/<name>/MAR-INF/MANIFEST.json

`try_handler` loads and calls the handler *in this process* through the
worker's own `ModelService` (the same load/handle path, Context and encoding as
a worker), so `print`, `breakpoint()` and tracebacks appear in the notebook.
Notebook variables are NOT visible to the handler: it runs from the file, as a
worker would.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_serve.archive import ArchiveSpec, build_mar, manifest_for
from jupyter_serve.archive.build import MAGICS_WORKDIR
from jupyter_serve.archive.manifest import MANIFEST_PATH
from jupyter_serve.wire.protocol import (
    Frame,
    InferenceRequest,
    InferenceResult,
    Kind,
    Parameter,
    decode_results,
    encode_infer,
)


@dataclass(frozen=True)
class HandlerFolder:
    """One `%%handler NAME` work folder and how to package it."""

    name: str
    path: Path
    handler: str = "handler.py"
    model_file: str | None = None
    serialized_file: str | None = None
    extra_files: tuple[str, ...] = field(default=())
    version: str = "1.0"

    def spec(self, export_path: Path, *, force: bool = True) -> ArchiveSpec:
        """The archive spec that packs this folder (inputs taken from inside it)."""

        def inside(name: str | None) -> str | None:
            return str(self.path / name) if name else None

        return ArchiveSpec(
            model_name=self.name,
            version=self.version,
            handler=str(self.path / self.handler),
            model_file=inside(self.model_file),
            serialized_file=inside(self.serialized_file),
            extra_files=tuple(str(self.path / e) for e in self.extra_files),
            export_path=str(export_path),
            force=force,
        )


def write_handler(
    name: str,
    source: str,
    *,
    root: Path | None = None,
    entry: str | None = None,
    model_file: str | None = None,
    serialized_file: str | None = None,
    extra_files: Sequence[str] = (),
    version: str = "1.0",
) -> HandlerFolder:
    """Write `source` as the handler of work folder `name`; copy the other inputs in.

    Raises:
        SyntaxError: the cell does not compile (line numbers are the cell's).
        FileNotFoundError: an input file is missing.
    """
    compile(source, f"<%%handler {name}>", "exec")
    path = (root or Path(MAGICS_WORKDIR)) / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "handler.py").write_text(source, encoding="utf-8")
    copied = [_copy_in(path, f) for f in (model_file, serialized_file, *extra_files)]
    folder = HandlerFolder(
        name=name,
        path=path,
        handler=f"handler:{entry}" if entry else "handler.py",
        model_file=copied[0],
        serialized_file=copied[1],
        extra_files=tuple(c for c in copied[2:] if c),
        version=version,
    )
    manifest = manifest_for(folder.spec(path)).to_json()
    (path / "MAR-INF").mkdir(exist_ok=True)
    (path / MANIFEST_PATH).write_text(manifest, encoding="utf-8")
    return folder


def _copy_in(folder: Path, source: str | None) -> str | None:
    if not source:
        return None
    src = Path(source)
    if not src.exists():
        raise FileNotFoundError(f"No such file or directory: {source}")
    target = folder / src.name
    if src.resolve() != target.resolve():
        if src.is_dir():
            shutil.copytree(src, target, dirs_exist_ok=True)
        else:
            shutil.copy2(src, target)
    return src.name


def build_handler_mar(folder: HandlerFolder, export_path: Path) -> Path:
    """Pack the work folder into `<export_path>/<name>.mar` (overwriting an older one)."""
    export_path.mkdir(parents=True, exist_ok=True)
    return build_mar(folder.spec(export_path))


@dataclass(frozen=True)
class TryResult:
    """What `%serve try` shows: the load error, or the response as the server would send it."""

    loaded: bool
    result: InferenceResult | None = None
    error: dict[str, object] = field(default_factory=dict)

    @property
    def status(self) -> int:
        if self.result is not None:
            return self.result.status
        return int(str(self.error.get("status", 500)))

    def __repr__(self) -> str:
        # Short: the magic has already shown the response (a cell's last line echoes this).
        if self.result is not None:
            return f"<TryResult {self.status}, {len(self.result.body)} bytes>"
        return f"<TryResult {self.status}: {self.error.get('message')}>"


def make_request(body: bytes, content_type: str, request_id: str = "try-0") -> InferenceRequest:
    """A one-parameter request as a route builds it for a raw body."""
    headers = {"Content-Type": content_type, "explain": "False"}
    return InferenceRequest(request_id, headers, (Parameter("body", content_type, body),))


def try_handler(folder: Path, request: InferenceRequest, handler: str = "") -> TryResult:
    """Load the handler of `folder` in this process and run one request through it."""
    from jupyter_serve.worker.service import ModelService  # the worker's own code path

    service = ModelService()
    load = Frame(Kind.LOAD, {"model_name": folder.name, "model_dir": str(folder),
                             "handler": handler, "batch_size": 1})  # fmt: skip
    with _isolated_imports(folder):
        loaded = service.load(load)
        if loaded.kind is Kind.ERROR:
            return TryResult(False, error=loaded.header)
        answer = service.infer(encode_infer([request]))
    if answer.kind is Kind.ERROR:
        return TryResult(True, error=answer.header)
    return TryResult(True, result=decode_results(answer)[0])


@contextmanager
def _isolated_imports(folder: Path) -> Iterator[None]:
    """Import the folder's modules afresh and forget them afterwards (cells get edited)."""
    saved_path = list(sys.path)
    _forget_modules_under(folder.parent)
    try:
        yield
    finally:
        sys.path[:] = saved_path
        _forget_modules_under(folder.parent)


def _forget_modules_under(root: Path) -> None:
    base = root.resolve()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve().is_relative_to(base):
            del sys.modules[name]


def check_resolves(folder: HandlerFolder) -> str:
    """Resolve the handler as a worker would; its entry point, or `HandlerLoadError`."""
    from jupyter_serve.worker.loader import resolve_handler

    with _isolated_imports(folder.path):
        entry = resolve_handler(folder.handler, folder.path)
    kind = "class" if entry.is_class else "function"
    return f"{kind} {entry.name} in {Path(entry.origin).name}"
