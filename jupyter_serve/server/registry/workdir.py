"""What the registry puts in its workdir for a model version, and removing it again.

An archive is extracted into `<workdir>/.incoming/<uuid>`, then moved to
`<workdir>/<name>/<version>-<uuid>` once its manifest (or the register's
`model_name`) names it; a no-archive folder is used where it is. With
`install_py_dep_per_model` the archive's requirements file is installed into
`<workdir>/<name>/deps-<version>` and that folder joins the model's python path.

Which file or folder a url names is `sources.locate`'s concern; reserving the
name, starting the workers and dropping the model are `registry.ModelRegistry`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_serve.archive import check_model_name, extract_mar, read_manifest
from jupyter_serve.server.deps import install_requirements
from jupyter_serve.server.models import ModelSpec, RegisterParams, resolve_spec
from jupyter_serve.server.registry.sources import Source, archive_stem
from jupyter_serve.wire.errors import ArchiveError, NotAnArchive

if TYPE_CHECKING:
    from jupyter_serve.server.registry.registry import RegistryConfig

__all__ = ["NOT_AN_ARCHIVE", "install_model_requirements", "prepare_model", "remove_paths"]

NOT_AN_ARCHIVE = "Model name is not defined."  # TorchServe 0.12's 400 for a file it cannot open


async def prepare_model(
    config: RegistryConfig, url: str, source: Source, params: RegisterParams
) -> tuple[ModelSpec, Path | None]:
    """The spec of the located model, extracting an archive under the workdir first.

    Returns the spec and the folder the archive was extracted into (None for a
    folder used in place); a failed step leaves nothing in `.incoming`.
    """
    resolve = functools.partial(resolve_spec, defaults=config.defaults, gpus=config.gpus)
    if source.is_folder:
        return resolve(source.path, params=params, model_url=url), None
    tag = uuid.uuid4().hex
    staging = config.workdir / ".incoming" / tag
    limits = config.extract_limits
    try:
        root = await asyncio.to_thread(extract_mar, source.path, staging, limits=limits)
    except NotAnArchive as exc:  # TorchServe's answer (its default manifest has no name)
        raise ArchiveError(NOT_AN_ARCHIVE, cause=exc.message) from None
    try:
        name = params.model_name or read_manifest(root).model.model_name
        name = name or archive_stem(source.path)
        check_model_name(name)
        params = dataclasses.replace(params, model_name=name)
        spec = resolve(root, params=params, model_url=url)
        final = config.workdir / name / f"{spec.version}-{tag}"
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, final)
    except BaseException:
        await asyncio.to_thread(remove_paths, staging)
        raise
    return spec.with_changes(model_dir=str(final / root.relative_to(staging))), final


async def install_model_requirements(config: RegistryConfig, spec: ModelSpec) -> ModelSpec:
    """Install the archive's requirements file when `install_py_dep_per_model` is on."""
    requirements = spec.manifest.get("model", {}).get("requirementsFile")
    if not (config.install_py_dep_per_model and requirements):
        return spec
    target = config.workdir / spec.model_name / f"deps-{spec.version}"
    source = Path(spec.model_dir) / requirements
    await install_requirements(source, target, spec.python, extra_args=config.pip_args,
                               withhold=config.env_withheld)  # fmt: skip
    return spec.with_changes(python_path=(*spec.python_path, str(target)))


def remove_paths(*paths: Path | None) -> None:
    """Remove each path: a folder with its tree, a file or a symlink itself; None skipped."""
    for path in paths:
        if path is None:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
