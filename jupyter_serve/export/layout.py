"""Write an export: every part into a temporary folder beside DIR, then renamed into place.

`write_export(dest, items, skipped, options)`:

1. refuses a DIR that is a file, or a non-empty folder unless `options.force`;
2. fetches every item's archive into `<tmp>/model-store/` (`<name>.mar`, or
   `<name>-<version>.mar` for a model with several versions); a version whose archive
   cannot be had is left out with its reason (`Skipped`), the others go on; a language
   model's archive gets the `causal_lm` handler as a file TorchServe runs
   (lm_archive.py);
3. writes `config/config.properties`, `inferenceservice.yaml`, each language model's
   folder for KServe's Hugging Face runtime (`huggingface/<model>/`, its default
   version), the example request bodies the archives ship (`samples/`, samples.py) and
   `README.md`;
4. renames the folder onto DIR (an old DIR, with `force`, is moved aside first and
   removed after). Any failure removes the temporary folder: nothing half-written stays.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from jupyter_serve.export.facts import archive_facts
from jupyter_serve.export.kserve import (
    inference_services,
    inference_services_yaml,
    model_folder,
    service_name,
)
from jupyter_serve.export.lm_archive import make_portable, write_model_folder
from jupyter_serve.export.plan import ExportError, ExportItem, NotExported, Skipped
from jupyter_serve.export.properties import config_properties
from jupyter_serve.export.readme import Exported, readme
from jupyter_serve.export.samples import write_samples
from jupyter_serve.wire.errors import ServeError

__all__ = ["ExportOptions", "ExportResult", "write_export"]


@dataclass(frozen=True)
class ExportOptions:
    """The choices of `jupyter serve export` beyond what to export."""

    force: bool = False
    protocol: str = "v1"
    storage_uri: str | None = None
    name: str | None = None  # the InferenceService's name; default: DIR's name


@dataclass(frozen=True)
class ExportResult:
    """What was written where, and what was left out."""

    path: Path
    exported: tuple[Exported, ...] = ()
    skipped: tuple[Skipped, ...] = field(default_factory=tuple)


def write_export(
    dest: Path, items: Sequence[ExportItem], skipped: Sequence[Skipped], options: ExportOptions
) -> ExportResult:
    """Write the export of `items` to `dest` (module docstring).

    Raises:
        ExportError: `dest` is taken, no version could be exported, or writing failed.
    """
    dest = Path(os.path.abspath(dest))
    _check_destination(dest, options.force)
    if not items:
        raise ExportError(_nothing(skipped))
    dest.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
    try:
        exported, left_out = _archives(temp / "model-store", items)
        left_out = [*skipped, *left_out]
        if not exported:
            raise ExportError(_nothing(left_out))
        exported = _with_a_default(exported)
        _describe(temp, dest, exported, left_out, options)
        _move_into_place(temp, dest)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return ExportResult(dest, tuple(exported), tuple(left_out))


def _check_destination(dest: Path, force: bool) -> None:
    if dest.exists() and not dest.is_dir():
        raise ExportError(f"{dest} is a file, not a folder.")
    if dest.is_dir() and any(dest.iterdir()) and not force:
        raise ExportError(f"{dest} is not empty: pick another folder, or replace it with --force.")


def _nothing(skipped: Sequence[Skipped]) -> str:
    reasons = "; ".join(str(entry) for entry in skipped)
    return "Nothing to export" + (f": {reasons}" if reasons else ": no model is registered.")


def _archives(store: Path, items: Sequence[ExportItem]) -> tuple[list[Exported], list[Skipped]]:
    store.mkdir(parents=True)
    names = _file_names(items)
    exported: list[Exported] = []
    skipped: list[Skipped] = []
    for item in items:
        target = store / names[item.name, item.version]
        try:
            item.fetch(target)
            make_portable(target, item.batch_size)
            facts = archive_facts(target)
        except (NotExported, ServeError, OSError, ValueError) as error:
            target.unlink(missing_ok=True)
            skipped.append(Skipped(item.name, item.version, str(error)))
            continue
        exported.append(Exported(item, target.name, facts))
    return exported, skipped


def _file_names(items: Sequence[ExportItem]) -> dict[tuple[str, str], str]:
    """`<name>.mar`, or `<name>-<version>.mar` when the model has several versions."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item.name] = counts.get(item.name, 0) + 1
    names: dict[tuple[str, str], str] = {}
    taken: set[str] = set()
    for item in items:
        stem = item.name if counts[item.name] == 1 else f"{item.name}-{item.version}"
        file_name, extra = f"{stem}.mar", 1
        while file_name in taken:
            extra += 1
            file_name = f"{stem}-{extra}.mar"
        taken.add(file_name)
        names[item.name, item.version] = file_name
    return names


def _with_a_default(exported: list[Exported]) -> list[Exported]:
    """Every model keeps one default version: its latest exported one when the default
    itself was left out."""
    defaults = {e.item.name for e in exported if e.item.default}
    latest = {e.item.name: e.item.version for e in exported}
    return [
        e
        if e.item.name in defaults or latest[e.item.name] != e.item.version
        else replace(e, item=replace(e.item, default=True))
        for e in exported
    ]


def _describe(
    temp: Path,
    dest: Path,
    exported: Sequence[Exported],
    skipped: Sequence[Skipped],
    options: ExportOptions,
) -> None:
    """config.properties, inferenceservice.yaml, the language models' folders, the samples
    and README.md."""
    pairs = [(e.item, e.mar) for e in exported]
    requirements = any(e.facts.requirements for e in exported)
    written = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    (temp / "config").mkdir()
    (temp / "config" / "config.properties").write_text(
        config_properties(pairs, requirements, written), encoding="latin-1"
    )
    name = service_name(options.name or dest.name)
    items = [e.item for e in exported]
    language_models = {e.item.name for e in exported if e.facts.language_model and e.item.default}
    services = inference_services(name, items, options.protocol, options.storage_uri,
                                  language_models)  # fmt: skip
    text = inference_services_yaml(services, placeholder=options.storage_uri is None)
    (temp / "inferenceservice.yaml").write_text(text, encoding="utf-8")
    for e in exported:
        if e.item.name in language_models and e.item.default:
            folder = temp / model_folder(e.item.name)
            folder.parent.mkdir(exist_ok=True)
            write_model_folder(temp / "model-store" / e.mar, folder)
    samples = write_samples(temp, temp / "model-store", exported)
    (temp / "README.md").write_text(
        readme(name, exported, skipped, options.protocol, samples, services), encoding="utf-8"
    )


def _move_into_place(temp: Path, dest: Path) -> None:
    """Rename `temp` onto `dest`; an old `dest` is moved aside first, removed after."""
    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent))
        os.replace(dest, old / dest.name)
    try:
        os.replace(temp, dest)
    except BaseException:
        if old is not None:
            os.replace(old / dest.name, dest)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
