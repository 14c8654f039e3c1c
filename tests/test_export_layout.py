"""write_export: the layout, its files and its refusals, from items whose archives are built here
(no server: tests/test_export.py exports from real servers)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from kserve_schema import validate_inference_service
from mar_builder import build_handler_mar

from jupyter_serve.export import (
    ExportError,
    ExportItem,
    ExportOptions,
    NotExported,
    Skipped,
    write_export,
)
from jupyter_serve.export.kserve import resources, service_name
from jupyter_serve.server.ts_config import read_properties

ECHO = "def handle(data, context):\n    return data\n"


def archive(tmp_path: Path, name: str, version: str = "1.0", config: str | None = None) -> Path:
    store = tmp_path / f"built-{name}-{version}"
    store.mkdir()
    return store / build_handler_mar(store, name, ECHO, version=version, config=config)


def item(source: Path | None, name: str, version: str = "1.0", **settings: object) -> ExportItem:
    def fetch(target: Path) -> None:
        if source is None or not source.exists():
            raise NotExported(f"its files are gone: {source}")
        shutil.copyfile(source, target)

    values: dict[str, object] = {"default": True, **settings}
    return ExportItem(name=name, version=version, fetch=fetch, **values)  # type: ignore[arg-type]


def leftovers(parent: Path) -> list[str]:
    return sorted(path.name for path in parent.iterdir() if path.name.startswith("."))


def test_the_layout_and_what_each_file_says(tmp_path: Path) -> None:
    items = [
        item(archive(tmp_path, "two", "1.0"), "two", "1.0", default=True, min_workers=1,
             max_workers=2, batch_size=4, max_batch_delay_ms=50, response_timeout=30),
        item(archive(tmp_path, "two", "2.0"), "two", "2.0", default=False, min_workers=0),
        item(archive(tmp_path, "deps", config="jupyter_serve:\n  kernel: torch-env\n"
                     "  batchPolicy: strict\n"), "deps", worker_memory=700 * 2**20),
    ]  # fmt: skip
    dest = tmp_path / "My Export"
    result = write_export(dest, items, [], ExportOptions())
    assert sorted(p.name for p in (dest / "model-store").iterdir()) == [
        "deps.mar", "two-1.0.mar", "two-2.0.mar",
    ]  # fmt: skip
    properties = read_properties(dest / "config" / "config.properties")
    assert properties["model_store"] == "/mnt/models/model-store"
    assert properties["inference_address"] == "http://0.0.0.0:8085"
    assert properties["number_of_gpu"] == "0"
    assert "install_py_dep_per_model" not in properties
    snapshot = json.loads(properties["model_snapshot"])
    assert snapshot["modelCount"] == 3
    assert snapshot["models"]["two"]["1.0"] == {
        "defaultVersion": True, "marName": "two-1.0.mar", "minWorkers": 1, "maxWorkers": 2,
        "batchSize": 4, "maxBatchDelay": 50, "responseTimeout": 30, "startupTimeout": 120,
        "runtimeType": "python",
    }  # fmt: skip
    assert snapshot["models"]["two"]["2.0"]["defaultVersion"] is False
    service = yaml.safe_load((dest / "inferenceservice.yaml").read_text())
    validate_inference_service(service)
    assert service["metadata"]["name"] == "my-export"
    model = service["spec"]["predictor"]["model"]
    assert model["storageUri"] == "gs://REPLACE-WITH-YOUR-BUCKET/my-export"
    assert model["protocolVersion"] == "v1"
    # 2 workers; 1 GiB frontend + 512 MiB (two 1.0, not measured) + 768 MiB (deps: 700 MiB)
    assert model["resources"]["limits"] == {"cpu": "2", "memory": "2304Mi"}
    assert model["resources"]["requests"] == model["resources"]["limits"]
    readme = (dest / "README.md").read_text()
    assert (
        "torchserve --start --model-store model-store --ts-config config/config.properties"
        in readme
    )
    assert "kubectl apply -f inferenceservice.yaml" in readme
    assert "ran in the Python of the Jupyter kernel `torch-env`" in readme
    assert "`jupyter_serve: {batchPolicy: strict}` is jupyter_serve's alone" in readme
    assert "| two | 1.0 (default) | 1-2 | 4 | 50 | 30 | cpu | `model-store/two-1.0.mar` |" in readme
    assert [e.mar for e in result.exported] == ["two-1.0.mar", "two-2.0.mar", "deps.mar"]
    assert leftovers(tmp_path) == []


def test_requirements_gpu_protocol_and_storage_uri(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "echo.py").write_text(ECHO)
    (src / "requirements.txt").write_text("numpy\n")
    from jupyter_serve.archive import ArchiveSpec, build_mar

    mar = build_mar(ArchiveSpec(model_name="gpu", version="1.0", handler=str(src / "echo.py"),
                                requirements_file=str(src / "requirements.txt"),
                                export_path=str(src)))  # fmt: skip
    items = [item(mar, "gpu", device_type="gpu", device_ids=(0, 1), min_workers=2)]
    options = ExportOptions(protocol="v2", storage_uri="s3://bucket/x", name="GPU Service")
    write_export(tmp_path / "out", items, [], options)
    properties = read_properties(tmp_path / "out" / "config" / "config.properties")
    assert properties["install_py_dep_per_model"] == "true"
    assert "number_of_gpu" not in properties
    service = yaml.safe_load((tmp_path / "out" / "inferenceservice.yaml").read_text())
    validate_inference_service(service)
    model = service["spec"]["predictor"]["model"]
    assert (model["protocolVersion"], model["storageUri"]) == ("v2", "s3://bucket/x")
    assert model["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert service["metadata"]["name"] == "gpu-service"
    assert "REPLACE" not in (tmp_path / "out" / "inferenceservice.yaml").read_text()


def test_a_version_that_cannot_be_fetched_is_named_and_the_rest_exported(tmp_path: Path) -> None:
    items = [
        item(archive(tmp_path, "kept"), "kept"),
        item(None, "gone", "1.0", default=True),
        item(archive(tmp_path, "gone", "2.0"), "gone", "2.0", default=False),
    ]
    result = write_export(tmp_path / "out", items, [Skipped("ghost", "", "not registered")],
                          ExportOptions())  # fmt: skip
    assert [str(s) for s in result.skipped] == [
        "ghost: not registered",
        "gone 1.0: its files are gone: None",
    ]
    snapshot = json.loads(
        read_properties(tmp_path / "out/config/config.properties")["model_snapshot"]
    )
    assert sorted(snapshot["models"]) == ["gone", "kept"]
    assert snapshot["models"]["gone"]["2.0"]["defaultVersion"] is True  # the default went
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "- **gone 1.0: its files are gone: None**: not exported." in readme
    assert "- **ghost: not registered**: not exported." in readme


def test_a_non_empty_folder_needs_force_and_nothing_half_written_stays(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep me")
    items = [item(archive(tmp_path, "m"), "m")]
    with pytest.raises(ExportError, match="is not empty: pick another folder, or replace it"):
        write_export(dest, items, [], ExportOptions())
    assert [p.name for p in dest.iterdir()] == ["mine.txt"]

    with pytest.raises(ExportError, match=r"Nothing to export: m 1\.0: its files are gone"):
        write_export(dest, [item(None, "m")], [], ExportOptions(force=True))
    assert [p.name for p in dest.iterdir()] == ["mine.txt"]  # the old one is untouched
    assert leftovers(tmp_path) == []

    write_export(dest, items, [], ExportOptions(force=True))
    assert sorted(p.name for p in dest.iterdir()) == [
        "README.md", "config", "inferenceservice.yaml", "model-store",
    ]  # fmt: skip
    assert leftovers(tmp_path) == []
    with pytest.raises(ExportError, match="Nothing to export: no model is registered"):
        write_export(tmp_path / "empty", [], [], ExportOptions())
    assert not (tmp_path / "empty").exists()


def test_a_failure_while_writing_removes_the_partial_folder(tmp_path: Path) -> None:
    def explode(target: Path) -> None:
        target.write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_export(tmp_path / "out", [ExportItem("m", "1.0", True, explode)], [],
                     ExportOptions())  # fmt: skip
    assert not (tmp_path / "out").exists()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("text", "name"),
    [("My Export", "my-export"), ("2024_models", "model-2024-models"), ("a" * 80, "a" * 63)],
)
def test_service_names_are_dns_labels(text: str, name: str) -> None:
    assert service_name(text) == name


def test_resources_of_unmeasured_workers_and_a_gpu_without_ids() -> None:
    fake = item(None, "m", min_workers=0, device_type="gpu")
    assert resources([fake])["limits"] == {"cpu": "1", "memory": "1024Mi", "nvidia.com/gpu": "1"}
