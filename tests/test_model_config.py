"""model-config.yaml: where it is found, what it sets, and every way it is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_serve.server.model_config import (
    MAX_CONFIG_BYTES,
    ModelConfig,
    find_config,
    json_safe,
    load_model_config,
)
from jupyter_serve.wire.errors import BadRequest

FULL_YAML = """\
minWorkers: 1
maxWorkers: 4
batchSize: 8
maxBatchDelay: 50
responseTimeout: 30
startupTimeout: 0
jobQueueSize: 7
maxRetryTimeoutInSec: 60
clientTimeoutInMills: 2500
continuousBatching: true
sequenceBatching: true
sequenceMaxIdleMSec: 30000
sequenceTimeoutMSec: 60000
maxSequenceJobQueueSize: 10
maxNumSequence: 2
deviceType: GPU
deviceIds: [1, 0]
parallelType: pp
handler:
  topk: 3
system:
  extraFiles: [a.txt]
  maxGPUMemory: 1024
jupyter_serve:
  batchPolicy: Strict
  torchThreads: 2
  kernel: torch-env
"""


def model_folder(tmp_path: Path, yaml_text: str | None, config_file: str | None = None) -> Path:
    folder = tmp_path / "model"
    (folder / "MAR-INF").mkdir(parents=True)
    model: dict[str, str] = {"modelName": "m", "handler": "h.py", "modelVersion": "1.0"}
    if config_file:
        model["configFile"] = config_file
    manifest = {"runtime": "python", "model": model}
    (folder / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    if yaml_text is not None:
        (folder / (config_file or "model-config.yaml")).write_text(yaml_text)
    return folder


def test_every_key_maps_to_its_spec_field(tmp_path: Path) -> None:
    config = load_model_config(model_folder(tmp_path, FULL_YAML))
    assert config.settings == {
        "min_workers": 1,
        "max_workers": 4,
        "batch_size": 8,
        "max_batch_delay": 0.05,  # milliseconds in the file, seconds in the spec
        "response_timeout": 30.0,
        "startup_timeout": 0.0,
        "job_queue_size": 7,
        "max_retry_timeout": 60.0,
        "client_timeout_ms": 2500,
        "continuous_batching": True,
        "sequence_batching": True,
        "sequence_max_idle_ms": 30000,
        "sequence_timeout_ms": 60000,
        "max_sequence_job_queue_size": 10,
        "max_num_sequence": 2,
        "device_type": "gpu",
        "device_ids": (1, 0),
        "batch_policy": "strict",
        "torch_threads": 2,
    }
    assert config.kernel == "torch-env"


def test_the_whole_file_is_kept_for_the_handler(tmp_path: Path) -> None:
    config = load_model_config(model_folder(tmp_path, FULL_YAML))
    assert config.data["handler"] == {"topk": 3}
    assert config.data["system"] == {"extraFiles": ["a.txt"], "maxGPUMemory": 1024}
    assert config.data["parallelType"] == "pp"
    assert config.data["jupyter_serve"]["kernel"] == "torch-env"
    assert json.loads(json.dumps(config.data)) == config.data


def test_manifest_config_file_wins_over_the_default_name(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "batchSize: 3\n", config_file="custom.yaml")
    (folder / "model-config.yaml").write_text("batchSize: 9\n")
    config = load_model_config(folder)
    assert config.path == (folder / "custom.yaml").resolve()
    assert config.settings == {"batch_size": 3}


def test_no_config_is_an_empty_one(tmp_path: Path) -> None:
    assert load_model_config(model_folder(tmp_path, None)) == ModelConfig()


def test_empty_file_and_nulls_are_absent(tmp_path: Path) -> None:
    assert load_model_config(model_folder(tmp_path, "")).settings == {}
    nulls = load_model_config(model_folder(tmp_path / "b", "batchSize:\njupyter_serve:\n"))
    assert nulls.settings == {}
    assert nulls.kernel is None


def test_config_file_named_but_missing_or_outside(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, None, config_file="gone.yaml")
    with pytest.raises(BadRequest, match=r'config file "gone\.yaml", which is not a file'):
        load_model_config(folder)
    (tmp_path / "outside.yaml").write_text("batchSize: 2\n")
    escaping = model_folder(tmp_path / "x", None)
    manifest = escaping / "MAR-INF" / "MANIFEST.json"
    data = json.loads(manifest.read_text())
    data["model"]["configFile"] = "../../outside.yaml"
    manifest.write_text(json.dumps(data))
    with pytest.raises(BadRequest, match="not a file in"):
        load_model_config(escaping)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("batchSize: [1\n", r"model-config.yaml: invalid YAML"),
        ("- 1\n- 2\n", r"expected a mapping of settings, got a list"),
        ("batchSize: four\n", r"model-config.yaml: batchSize must be an integer >= 1, got 'four'"),
        ("batchSize: 0\n", r"batchSize must be an integer >= 1, got 0"),
        ("batchSize: true\n", r"batchSize must be an integer >= 1, got True"),
        ("minWorkers: -1\n", r"minWorkers must be an integer >= 0"),
        ("maxBatchDelay: -5\n", r"maxBatchDelay must be a number >= 0"),
        ("maxBatchDelay: .nan\n", r"maxBatchDelay must be a number >= 0"),
        ("responseTimeout: 0\n", r"responseTimeout must be a number > 0"),
        ("deviceType: neuron\n", r"deviceType must be cpu or gpu, got 'neuron'. jupyter_serve"),
        ("deviceIds: 1\n", r"deviceIds must be a list of GPU ids"),
        ("continuousBatching: 'true'\n", r"continuousBatching must be true or false, got 'true'"),
        ("sequenceBatching: 1\n", r"sequenceBatching must be true or false, got 1"),
        ("sequenceMaxIdleMSec: -1\n", r"sequenceMaxIdleMSec must be an integer >= 0"),
        ("maxNumSequence: 0\n", r"maxNumSequence must be an integer >= 1"),
        ("maxSequenceJobQueueSize: 2.5\n", r"maxSequenceJobQueueSize must be an integer >= 1"),
        ("deviceIds: [0, x]\n", r"deviceIds must be an integer >= 0, got 'x'"),
        ("jupyter_serve: strict\n", r"jupyter_serve must be a mapping"),
        ("jupyter_serve:\n  batchPolicy: lazy\n", r"jupyter_serve: batchPolicy must be eager or"),
        ("jupyter_serve:\n  torchThreads: 0\n", r"torchThreads must be an integer >= 1"),
        ("jupyter_serve:\n  kernel: ''\n", r"kernel must be a non-empty string"),
        ("blob: !!binary aGk=\n", r"blob holds a bytes"),
        ("a: !!set {x}\n", r"a holds a set"),
    ],
)
def test_bad_values_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BadRequest, match=message) as caught:
        load_model_config(model_folder(tmp_path, text))
    assert str(tmp_path) in caught.value.message
    assert caught.value.status_code == 400


def test_python_tags_are_not_executed(tmp_path: Path) -> None:
    text = "x: !!python/object/apply:os.system ['touch pwned']\n"
    with pytest.raises(BadRequest, match="invalid YAML"):
        load_model_config(model_folder(tmp_path, text))
    assert not (tmp_path / "pwned").exists()


def test_alias_bombs_and_cycles_are_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    with pytest.raises(BadRequest, match="more than 100000 values"):
        load_model_config(model_folder(tmp_path, "\n".join(lines) + "\n"))
    with pytest.raises(BadRequest, match=r"nested more than 64 levels deep \(at a\[0\]"):
        load_model_config(model_folder(tmp_path / "cycle", "a: &a [*a]\n"))


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    text = "pad: '" + "x" * MAX_CONFIG_BYTES + "'\n"
    with pytest.raises(BadRequest, match="larger than"):
        load_model_config(model_folder(tmp_path, text))


def test_json_safe_turns_dates_and_keys_into_strings() -> None:
    import datetime

    data = {1: datetime.date(2024, 9, 24), "n": [None, 1.5, True]}
    assert json_safe(data, "cfg") == {"1": "2024-09-24", "n": [None, 1.5, True]}


def test_find_config_without_a_manifest_entry(tmp_path: Path) -> None:
    from jupyter_serve.archive import read_manifest

    folder = model_folder(tmp_path, "batchSize: 2\n")
    assert find_config(folder, read_manifest(folder)) == folder / "model-config.yaml"
