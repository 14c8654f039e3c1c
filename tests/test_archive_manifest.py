"""Reading and writing MANIFEST.json: TorchServe's, MMS's, and none at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_serve.archive import Manifest, ModelInfo, read_manifest
from jupyter_serve.archive.manifest import (
    CREATED_ON_FORMAT,
    MAX_NAME_LENGTH,
    check_model_name,
    now_created_on,
)
from jupyter_serve.wire.errors import ArchiveError

TORCHSERVE = {
    "createdOn": "24/09/2024 10:00:00",
    "runtime": "python",
    "model": {
        "modelName": "mnist",
        "serializedFile": "mnist_cnn.pt",
        "handler": "mnist_handler.py",
        "modelFile": "mnist.py",
        "modelVersion": "1.0",
        "requirementsFile": "requirements.txt",
        "configFile": "model-config.yaml",
    },
    "archiverVersion": "0.12.0",
}

MMS = {
    "runtime": "python",
    "model": {
        "modelName": "noop",
        "description": "Tests for noop model",
        "handler": "service:handle",
        "modelVersion": "1.11",
    },
    "modelServerVersion": "1.0",
    "implementationVersion": "1.0",
    "specificationVersion": "1.0",
    "engine": {"engineName": "MXNet", "engineVersion": "1.2"},
    "license": "Apache 2.0",
    "publisher": {"author": "MXNet SDK team", "email": "noreply@amazon.com"},
}


def write_manifest(folder: Path, data: object) -> Path:
    (folder / "MAR-INF").mkdir(parents=True)
    (folder / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(data))
    return folder


def test_torchserve_manifest_round_trips_exactly() -> None:
    manifest = Manifest.from_dict(TORCHSERVE)
    assert manifest.model == ModelInfo(
        model_name="mnist",
        handler="mnist_handler.py",
        model_version="1.0",
        serialized_file="mnist_cnn.pt",
        model_file="mnist.py",
        requirements_file="requirements.txt",
        config_file="model-config.yaml",
    )
    assert manifest.to_json() == json.dumps(TORCHSERVE, indent=2)
    assert not manifest.is_mms


def test_mms_manifest_loads_and_keeps_its_keys(tmp_path: Path) -> None:
    manifest = read_manifest(write_manifest(tmp_path, MMS))
    assert manifest.is_mms
    assert manifest.model.model_name == "noop"
    assert manifest.model.handler == "service:handle"
    assert manifest.model.model_version == "1.11"
    assert manifest.model.extra == {"description": "Tests for noop model"}
    assert manifest.to_dict() == MMS


def test_legacy_version_key_is_read_as_model_version() -> None:
    manifest = Manifest.from_dict({"model": {"modelName": "m", "version": "3", "handler": "h"}})
    assert manifest.model.model_version == "3"
    assert manifest.runtime == "python"


def test_folder_without_manifest_gets_the_default(tmp_path: Path) -> None:
    folder = tmp_path / "naked_model"
    folder.mkdir()
    manifest = read_manifest(folder)
    assert manifest.model.model_name == "naked_model"
    assert manifest.model.model_version == "1.0"
    assert manifest.runtime == "python"
    assert manifest.model.handler is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "Invalid manifest"),
        ("[1, 2]", "expected a JSON object"),
        ('{"runtime": "python"}', "Missing Model entry"),
        ('{"model": "x"}', "Missing Model entry"),
        ("[" * 200_000 + "]" * 200_000, "^Invalid manifest: nested too deeply\\.$"),
        ('{"model": {}, "pad": "' + "x" * (1 << 20) + '"}', "^Invalid manifest: over 1048576"),
        ('{"model": {"modelName": ["a"]}}', "^Invalid manifest: model.modelName must be a str"),
        ('{"model": {"handler": {"x": 1}}}', "^Invalid manifest: model.handler must be a string"),
        ('{"model": {"modelVersion": true}}', "model.modelVersion must be a string"),
    ],
)
def test_malformed_manifests_raise_archive_error(text: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "MAR-INF").mkdir()
    (tmp_path / "MAR-INF" / "MANIFEST.json").write_text(text)
    with pytest.raises(ArchiveError, match=message) as caught:
        read_manifest(tmp_path)
    assert caught.value.status_code == 400


def test_numbers_in_string_fields_are_read_as_their_text_as_torchserve_reads_them() -> None:
    info = Manifest.from_json('{"model": {"modelName": 12345, "modelVersion": 1.0}}').model
    assert (info.model_name, info.model_version) == ("12345", "1.0")


def test_created_on_uses_torch_model_archivers_format() -> None:
    from datetime import datetime

    stamp = now_created_on()
    assert datetime.strptime(stamp, CREATED_ON_FORMAT)
    assert CREATED_ON_FORMAT == "%d/%m/%Y %H:%M:%S"


def test_a_model_name_longer_than_the_cap_is_refused_before_it_names_a_folder() -> None:
    check_model_name("m" * MAX_NAME_LENGTH)
    with pytest.raises(ArchiveError, match="Model name is too long: 300 characters"):
        check_model_name("m" * 300)
