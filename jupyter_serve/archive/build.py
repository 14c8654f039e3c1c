"""`build_mar(spec)`: write a model archive exactly as torch-model-archiver 0.12 lays it out.

Layout rules (the same as torch-model-archiver's):

* every input lands at the archive root under its basename, in the order
  model file, serialized file, handler, extra files, requirements, config
  (a later input with the same name replaces an earlier one);
* a built-in handler name (`image_classifier`, ...) is not copied; a handler
  `path/mod[.py][:fn]` is copied as `mod.py`;
* `--extra-files` items are files, folders or glob patterns; a folder's
  *contents* land at the root (its subfolders keep their structure);
* folders named `__pycache__`, `__MACOSX` or starting with `.` are left out at
  any depth, and so are `.pyc` files;
* formats: `default` (zip, deflated), `zip-store` (zip, stored), `tgz`
  (everything under `<model-name>/`), `no-archive` (a folder).

Archives are written to a temporary file beside the output and renamed into
place, so a failed build never leaves a half-written `.mar`.

`MAGICS_WORKDIR` is the folder the kernel's magics build in (kernel/workspace.py), which
the server also accepts archives from (server/registry/sources.py).
"""

from __future__ import annotations

import errno
import glob
import logging
import os
import shutil
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path, PurePosixPath

from jupyter_serve._version import __version__
from jupyter_serve.archive.manifest import (
    MANIFEST_PATH,
    Manifest,
    ModelInfo,
    check_model_name,
    now_created_on,
)
from jupyter_serve.archive.spec import ArchiveSpec
from jupyter_serve.wire.errors import ArchiveError

log = logging.getLogger(__name__)

MAGICS_WORKDIR = "jupyter_serve_work"  # relative to the kernel's working directory
BUILTIN_HANDLERS = frozenset(
    {
        "base_handler",
        "text_classifier",
        "causal_lm",
        "image_classifier",
        "object_detector",
        "image_segmenter",
        "dali_image_classifier",
        "vllm_handler",
        "trt_llm_handler",
    }
)
LSP_BUILTIN_HANDLERS = frozenset({"BaseHandler", "TorchScriptHandler"})
ARCHIVE_SUFFIXES = {"default": ".mar", "zip-store": ".mar", "tgz": ".tar.gz", "no-archive": ""}
SKIPPED_FOLDERS = frozenset({"__pycache__", "__MACOSX"})

# arcname (posix, relative to the model root) -> source file
FileMap = dict[str, Path]


def output_path(spec: ArchiveSpec) -> Path:
    """Where `build_mar(spec)` writes: `<export-path>/<model-name><suffix>`."""
    suffix = ARCHIVE_SUFFIXES[spec.archive_format]
    return Path(spec.export_path) / f"{spec.model_name}{suffix}"


def manifest_for(spec: ArchiveSpec) -> Manifest:
    """The manifest torch-model-archiver would write for the same arguments."""
    model = ModelInfo(
        model_name=spec.model_name,
        serialized_file=_basename(spec.serialized_file),
        handler=os.path.basename(spec.handler),
        model_file=_basename(spec.model_file),
        model_version=spec.version,
        requirements_file=_basename(spec.requirements_file),
        config_file=_basename(spec.config_file),
    )
    return Manifest(
        model=model,
        runtime=spec.runtime,
        created_on=now_created_on(),
        archiver_version=__version__,
    )


def build_mar(spec: ArchiveSpec) -> Path:
    """Build the archive `spec` describes and return its path.

    Raises:
        ArchiveError: bad model name, export path not a folder, output exists
            without `force`.
        FileNotFoundError: an input file (or a non-glob extra file) is missing.
    """
    manifest = manifest_for(spec)
    check_model_name(spec.model_name)
    export = Path(spec.export_path)
    if not export.is_dir():
        raise ArchiveError(
            f"Given export-path {spec.export_path} is not a directory. "
            "Point to a valid export-path directory."
        )
    target = output_path(spec)
    _check_overwrite(target, spec.force)
    files = collect_files(spec, exclude=target)
    writer = _WRITERS[spec.archive_format]
    writer(files, manifest, target, spec)
    log.info("Successfully exported model %s to file %s", spec.model_name, target)
    return target


def _check_overwrite(target: Path, force: bool) -> None:
    if not (target.exists() or target.is_symlink()):
        return
    if not force:
        raise ArchiveError(
            f"{target} already exists.\n"
            "Please specify --force/-f option to overwrite the model archive output file.\n"
            "See -h/--help for more details."
        )
    log.warning("Overwriting %s ...", target)


def collect_files(spec: ArchiveSpec, exclude: Path | None = None) -> FileMap:
    """Every file of the archive, keyed by its name inside it, filters applied."""
    files: FileMap = {}
    for single in (spec.model_file, spec.serialized_file, _handler_source(spec)):
        _add_file(files, single)
    for item in spec.extra_files:
        files.update(_expand_extra(item))
    for single in (spec.requirements_file, spec.config_file):
        _add_file(files, single)
    skip = exclude.resolve() if exclude is not None else None
    return {
        name: src
        for name, src in sorted(files.items())
        if _is_kept(name) and (skip is None or src.resolve() != skip)
    }


def _handler_source(spec: ArchiveSpec) -> str | None:
    """The file to copy for `--handler`, or None for a built-in handler."""
    handler = spec.handler
    if spec.runtime == "LSP":
        if handler in LSP_BUILTIN_HANDLERS:
            return None
        library = ".dylib" if sys.platform == "darwin" else ".so"
        path = handler.split(":", 1)[0]
        return path if path.endswith(library) else path + library
    if handler in BUILTIN_HANDLERS:
        return None
    path = handler.split(":", 1)[0]
    return path if path.endswith(".py") else path + ".py"


def _add_file(files: FileMap, path: str | None) -> None:
    if not path:
        return
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
    files[source.name] = source


def _expand_extra(item: str) -> FileMap:
    """One `--extra-files` item: a file, a folder (its contents) or a glob pattern."""
    is_pattern = glob.has_magic(item)
    if not is_pattern and not os.path.lexists(item):
        raise FileNotFoundError(errno.ENOENT, "File does not exist", item)
    matches = sorted(glob.glob(item)) if is_pattern else [item]
    if is_pattern and not matches:
        log.warning("Given wildcard pattern did not match any file: %s", item)
    found: FileMap = {}
    for match in matches:
        path = Path(match)
        if path.is_file():
            found[path.name] = path
        elif path.is_dir():
            found.update((rel, src) for rel, src in _walk_folder(path))
        else:
            raise ArchiveError(f"Invalid extra file given {match}")
    return found


def _walk_folder(folder: Path) -> Iterator[tuple[str, Path]]:
    """(name relative to `folder`, file) for every file below it, links followed once."""
    seen: set[str] = set()
    for root, dirs, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:  # a symlink cycle
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        for name in sorted(names):
            path = Path(root) / name
            if path.is_file():
                yield path.relative_to(folder).as_posix(), path


def _is_kept(name: str) -> bool:
    """The archiver's filters: no cache/hidden folders, no bytecode, no stale manifest."""
    parts = PurePosixPath(name).parts
    folders = parts[:-1]
    if any(part in SKIPPED_FOLDERS or part.startswith(".") for part in folders):
        return False
    return not name.endswith(".pyc") and name != MANIFEST_PATH


def _basename(path: str | None) -> str | None:
    return os.path.basename(path) if path else None


def pack_folder(folder: Path, target: Path, manifest: Manifest) -> Path:
    """Zip a model folder (extracted archive, no-archive folder) into the `.mar` `target`,
    with `manifest` as its MAR-INF/MANIFEST.json: every file below `folder` (links
    followed once), the archiver's filters applied. Written atomically."""
    files = {name: source for name, source in _walk_folder(folder) if _is_kept(name)}
    _zip(files, manifest, target, zipfile.ZIP_DEFLATED)
    return target


def _write_zip(files: FileMap, manifest: Manifest, target: Path, spec: ArchiveSpec) -> None:
    compression = zipfile.ZIP_STORED if spec.archive_format == "zip-store" else zipfile.ZIP_DEFLATED
    _zip(files, manifest, target, compression)


def _zip(files: FileMap, manifest: Manifest, target: Path, compression: int) -> None:
    with _replaced_atomically(target) as partial, zipfile.ZipFile(partial, "w", compression) as zf:
        for name, source in files.items():
            zf.write(source, name)
        zf.writestr(MANIFEST_PATH, manifest.to_json())


def _write_tgz(files: FileMap, manifest: Manifest, target: Path, spec: ArchiveSpec) -> None:
    root = spec.model_name
    with _replaced_atomically(target) as partial, tarfile.open(partial, "w:gz") as tar:
        for name, source in files.items():
            tar.add(source, arcname=f"{root}/{name}", recursive=False)
        data = manifest.to_json().encode("utf-8")
        info = tarfile.TarInfo(f"{root}/{MANIFEST_PATH}")
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        tar.addfile(info, BytesIO(data))


def _write_folder(files: FileMap, manifest: Manifest, target: Path, spec: ArchiveSpec) -> None:
    # As torch-model-archiver does with --force, files are overwritten in place.
    for name, source in files.items():
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    manifest_file = target / MANIFEST_PATH
    manifest_file.parent.mkdir(parents=True, exist_ok=True)
    manifest_file.write_text(manifest.to_json(), encoding="utf-8")


@contextmanager
def _replaced_atomically(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside `target`; rename it onto `target` on success."""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    os.close(fd)
    partial = Path(name)
    try:
        yield partial
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.chmod(0o644)  # mkstemp creates 0600; archives are ordinary readable files
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    os.replace(partial, target)


_WRITERS = {
    "default": _write_zip,
    "zip-store": _write_zip,
    "tgz": _write_tgz,
    "no-archive": _write_folder,
}
