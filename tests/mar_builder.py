"""Tests' one way to make a small `.mar`: a handler source (and a model-config.yaml) packed
with jupyter_serve.archive into a model store, as a user's build script would."""

from __future__ import annotations

from pathlib import Path

from jupyter_serve.archive import ArchiveSpec, build_mar


def build_handler_mar(
    store: Path,
    name: str,
    source: str,
    *,
    version: str = "1.0",
    module: str = "echo",
    config: str | None = None,
) -> str:
    """Write `<module>.py` (and the yaml) beside `store`, pack `<store>/<name>.mar`, return
    its file name (what `url=` takes)."""
    src = store.parent / f"src-{name}-{version}"
    src.mkdir(parents=True, exist_ok=True)
    (src / f"{module}.py").write_text(source)
    config_file = None
    if config is not None:
        (src / "model-config.yaml").write_text(config)
        config_file = str(src / "model-config.yaml")
    spec = ArchiveSpec(
        model_name=name, version=version, handler=str(src / f"{module}.py"),
        export_path=str(store), config_file=config_file,
    )  # fmt: skip
    return build_mar(spec).name
