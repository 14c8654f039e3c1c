"""ModelSpec validation and resolve_spec's merge: server defaults < model-config.yaml < REST."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_serve.server.models import (
    BatchPolicy,
    DeviceType,
    ModelSpec,
    RegisterParams,
    ServerDefaults,
    resolve_spec,
)
from jupyter_serve.wire.errors import BadRequest


def spec(**changes: Any) -> ModelSpec:
    base: dict[str, Any] = {
        "model_name": "mnist",
        "version": "1.0",
        "model_dir": "/models/mnist",
        "handler": "handler:handle",
        "manifest": {"model": {"modelName": "mnist"}},
    }
    return ModelSpec(**{**base, **changes})


def model_folder(
    tmp_path: Path, yaml_text: str | None = None, manifest: dict[str, Any] | None = None
) -> Path:
    folder = tmp_path / "mnist"
    (folder / "MAR-INF").mkdir(parents=True)
    if manifest is None:
        manifest = {
            "runtime": "python",
            "model": {"modelName": "mnist", "handler": "mnist_handler.py", "modelVersion": "2.0"},
        }
    (folder / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    if yaml_text is not None:
        (folder / "model-config.yaml").write_text(yaml_text)
    return folder


# --- ModelSpec ------------------------------------------------------------------------------


def test_defaults_match_torchserve() -> None:
    s = spec()
    assert (s.batch_size, s.max_batch_delay, s.response_timeout, s.startup_timeout) == (
        1,
        0.1,
        120.0,
        120.0,
    )
    assert (s.min_workers, s.max_workers, s.job_queue_size) == (1, 1, 100)
    assert (s.device_type, s.batch_policy, s.runtime) == (
        DeviceType.CPU,
        BatchPolicy.EAGER,
        "python",
    )
    assert (s.max_retry_timeout, s.client_timeout_ms, s.python) == (300.0, 0, sys.executable)


def test_key_and_with_changes() -> None:
    s = spec()
    assert s.key == ("mnist", "1.0")
    bigger = s.with_changes(batch_size=8, python_path=["/deps"])
    assert (bigger.batch_size, bigger.python_path, s.batch_size) == (8, ("/deps",), 1)
    with pytest.raises(BadRequest, match="batch_size must be >= 1"):
        s.with_changes(batch_size=0)


def test_enum_values_and_sequences_are_normalised() -> None:
    s = spec(device_type="gpu", batch_policy="strict", device_ids=[1, 0])
    assert s.device_type is DeviceType.GPU
    assert s.batch_policy is BatchPolicy.STRICT
    assert s.device_ids == (1, 0)
    with pytest.raises(BadRequest, match="device_type must be cpu or gpu, got 'tpu'"):
        spec(device_type="tpu")


def test_startup_timeout_zero_is_allowed_for_the_pool_to_fail() -> None:
    assert spec(startup_timeout=0).startup_timeout == 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_name": "bad name!"}, "Model name contains special characters"),
        ({"version": ""}, "Model version must be a non-empty string"),
        ({"version": "1/2"}, "without '/'"),
        ({"handler": " "}, r'Model "mnist" has no handler: set "handler" in MAR-INF'),
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"batch_size": True}, "batch_size must be >= 1, got True"),
        ({"max_batch_delay": -0.1}, "max_batch_delay must be >= 0 seconds"),
        ({"max_batch_delay": float("inf")}, "max_batch_delay must be >= 0 seconds"),
        ({"response_timeout": 0}, "response_timeout must be > 0 seconds"),
        ({"startup_timeout": -1}, "startup_timeout must be >= 0 seconds"),
        ({"job_queue_size": 0}, "job_queue_size must be >= 1"),
        ({"max_retry_timeout": -1}, "max_retry_timeout must be >= 0"),
        ({"client_timeout_ms": 1.5}, "client_timeout_ms must be an integer >= 0"),
        ({"min_workers": -1}, "Worker counts must be integers >= 0"),
        ({"min_workers": 2, "max_workers": 1}, "max_worker cannot be less than min_worker."),
        ({"torch_threads": 0}, "torch_threads must be >= 1"),
        ({"device_ids": (0, -1)}, "device_ids must be GPU ids >= 0"),
        ({"batch_policy": "lazy"}, "batch_policy must be eager or strict"),
        ({"runtime": "python4"}, "Invalid RuntimeType value: python4"),
        ({"sequence_batching": True}, "sequenceBatching needs sequenceMaxIdleMSec > 0"),
        ({"sequence_timeout_ms": -5}, "sequence_timeout_ms must be an integer >= 0"),
        ({"max_num_sequence": 0}, "max_num_sequence must be an integer >= 1"),
    ],
)
def test_invalid_specs_are_bad_requests(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequest, match=message) as caught:
        spec(**changes)
    assert caught.value.status_code == 400


# --- resolve_spec ---------------------------------------------------------------------------


def test_manifest_gives_identity_and_server_defaults_the_rest(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    s = resolve_spec(folder, model_url="mnist.mar", gpus=0)
    assert (s.model_name, s.version, s.handler, s.model_url) == (
        "mnist",
        "2.0",
        "mnist_handler.py",
        "mnist.mar",
    )
    assert s.model_dir == str(folder)
    assert s.manifest["model"]["modelVersion"] == "2.0"
    assert (s.batch_size, s.max_batch_delay, s.min_workers, s.max_workers) == (1, 0.1, 0, 0)
    assert s.model_yaml_config == {}


def test_server_defaults_apply_and_convert_ms(tmp_path: Path) -> None:
    defaults = ServerDefaults(
        batch_size=4,
        max_batch_delay_ms=250,
        response_timeout=9,
        startup_timeout=8,
        default_workers=2,
        job_queue_size=5,
        limit_max_image_pixels=False,
        decode_input_request=False,
        batch_policy=BatchPolicy.STRICT,
        python="/opt/py/bin/python",
        max_retry_timeout=7,
        torch_threads=1,
    )
    s = resolve_spec(model_folder(tmp_path), defaults=defaults, gpus=0)
    assert (s.batch_size, s.max_batch_delay, s.response_timeout, s.startup_timeout) == (
        4,
        0.25,
        9,
        8,
    )
    assert (s.min_workers, s.max_workers, s.job_queue_size) == (2, 2, 5)
    assert (s.limit_max_image_pixels, s.decode_input_request) == (False, False)
    assert (s.batch_policy, s.python, s.max_retry_timeout, s.torch_threads) == (
        BatchPolicy.STRICT,
        "/opt/py/bin/python",
        7,
        1,
    )


def test_yaml_beats_server_defaults(tmp_path: Path) -> None:
    yaml_text = (
        "batchSize: 8\nmaxBatchDelay: 50\nresponseTimeout: 30\njobQueueSize: 3\n"
        "minWorkers: 1\nmaxWorkers: 4\nclientTimeoutInMills: 100\nmaxRetryTimeoutInSec: 5\n"
        "handler: {topk: 2}\njupyter_serve: {batchPolicy: strict, torchThreads: 3}\n"
    )
    defaults = ServerDefaults(batch_size=2, default_workers=2)
    s = resolve_spec(model_folder(tmp_path, yaml_text), defaults=defaults, gpus=0)
    assert (s.batch_size, s.max_batch_delay, s.response_timeout, s.job_queue_size) == (
        8,
        0.05,
        30,
        3,
    )
    assert (s.min_workers, s.max_workers) == (1, 4)
    assert (s.client_timeout_ms, s.max_retry_timeout) == (100, 5)
    assert (s.batch_policy, s.torch_threads) == (BatchPolicy.STRICT, 3)
    assert s.model_yaml_config["handler"] == {"topk": 2}


def test_rest_beats_yaml(tmp_path: Path) -> None:
    # TorchServe's test_model_config.py: yaml batchSize 4, register batch_size=2 -> 2.
    folder = model_folder(tmp_path, "batchSize: 4\nmaxBatchDelay: 50\nresponseTimeout: 30\n")
    params = RegisterParams(
        model_name="digits",
        handler="other:fn",
        runtime="python3",
        batch_size=2,
        max_batch_delay_ms=10,
        response_timeout=5,
        startup_timeout=0,
    )
    s = resolve_spec(folder, params=params, gpus=0)
    assert (s.model_name, s.handler, s.runtime) == ("digits", "other:fn", "python3")
    assert (s.batch_size, s.max_batch_delay, s.response_timeout, s.startup_timeout) == (
        2,
        0.01,
        5,
        0,
    )
    assert resolve_spec(folder, gpus=0).batch_size == 4  # not given: the yaml's


@pytest.mark.parametrize(
    ("yaml_text", "initial", "expected"),
    [
        (None, None, (3, 3)),  # server default
        ("minWorkers: 1\nmaxWorkers: 4\n", None, (1, 4)),  # yaml pair
        ("minWorkers: 2\n", None, (2, 2)),  # one alone stands for both
        ("maxWorkers: 5\n", None, (5, 5)),
        ("minWorkers: 1\nmaxWorkers: 4\n", 2, (2, 2)),  # REST initial_workers wins
        (None, 0, (0, 0)),
    ],
)
def test_worker_counts(
    tmp_path: Path, yaml_text: str | None, initial: int | None, expected: tuple[int, int]
) -> None:
    folder = model_folder(tmp_path, yaml_text)
    params = RegisterParams(initial_workers=initial)
    s = resolve_spec(folder, params=params, defaults=ServerDefaults(default_workers=3), gpus=0)
    assert (s.min_workers, s.max_workers) == expected


def test_yaml_workers_out_of_order_are_refused(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "minWorkers: 3\nmaxWorkers: 1\n")
    with pytest.raises(BadRequest, match="max_worker cannot be less than min_worker"):
        resolve_spec(folder, gpus=0)


def test_gpu_when_gpus_exist_cpu_otherwise(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    assert resolve_spec(folder, gpus=2).device_type is DeviceType.GPU
    assert resolve_spec(folder, gpus=0).device_type is DeviceType.CPU
    forced = ServerDefaults(device_type=DeviceType.CPU)
    assert resolve_spec(folder, defaults=forced, gpus=2).device_type is DeviceType.CPU


def test_yaml_device_settings(tmp_path: Path) -> None:
    on_cpu = resolve_spec(model_folder(tmp_path / "a", "deviceType: cpu\n"), gpus=2)
    assert (on_cpu.device_type, on_cpu.device_ids) == (DeviceType.CPU, ())
    pinned = resolve_spec(model_folder(tmp_path / "b", "deviceIds: [1]\n"), gpus=2)
    assert (pinned.device_type, pinned.device_ids) == (DeviceType.GPU, (1,))
    forced = ServerDefaults(device_type=DeviceType.CPU)
    asked = resolve_spec(model_folder(tmp_path / "c", "deviceType: gpu\n"), defaults=forced, gpus=1)
    assert asked.device_type is DeviceType.GPU  # the yaml beats the server default


def test_yaml_gpu_without_gpus_falls_back_to_cpu(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = model_folder(tmp_path, "deviceType: gpu\ndeviceIds: [0, 1]\n")
    with caplog.at_level(logging.WARNING, logger="jupyter_serve.server.models"):
        s = resolve_spec(folder, gpus=0)
    assert (s.device_type, s.device_ids) == (DeviceType.CPU, ())
    assert "no GPU is usable" in caplog.text


def test_yaml_device_ids_beyond_the_visible_gpus_are_refused(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "deviceIds: [0, 3]\n")
    with pytest.raises(BadRequest, match=r"deviceIds \[3\] name GPUs this server cannot use"):
        resolve_spec(folder, gpus=2)


def test_gpus_default_to_the_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_serve.server import devices

    monkeypatch.setattr(devices, "gpu_count", lambda env=None: 1)
    assert resolve_spec(model_folder(tmp_path)).device_type is DeviceType.GPU


def test_kernel_in_yaml_picks_the_workers_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernels = tmp_path / "jupyter" / "kernels" / "torch-env"
    kernels.mkdir(parents=True)
    python = tmp_path / "python3"
    python.symlink_to(sys.executable)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec_json = {"argv": argv, "display_name": "t", "language": "python"}
    (kernels / "kernel.json").write_text(json.dumps(spec_json))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    folder = model_folder(tmp_path, "jupyter_serve:\n  kernel: torch-env\n")
    assert resolve_spec(folder, gpus=0).python == str(python)
    unknown = model_folder(tmp_path / "u", "jupyter_serve:\n  kernel: no-such-kernel\n")
    with pytest.raises(BadRequest, match='No such kernel: "no-such-kernel"'):
        resolve_spec(unknown, gpus=0)


def test_folder_without_manifest(tmp_path: Path) -> None:
    folder = tmp_path / "naked"
    folder.mkdir()
    s = resolve_spec(folder, params=RegisterParams(handler="h:handle"), gpus=0)
    assert (s.model_name, s.version, s.handler) == ("naked", "1.0", "h:handle")
    with pytest.raises(BadRequest, match='Model "naked" has no handler'):
        resolve_spec(folder, gpus=0)


def test_bad_rest_values_are_refused_by_the_spec(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    with pytest.raises(BadRequest, match="Invalid RuntimeType value: InvalidRuntime"):
        resolve_spec(folder, params=RegisterParams(runtime="InvalidRuntime"), gpus=0)
    with pytest.raises(BadRequest, match="batch_size must be >= 1"):
        resolve_spec(folder, params=RegisterParams(batch_size=0), gpus=0)
    with pytest.raises(BadRequest, match="Model name contains special characters"):
        resolve_spec(folder, params=RegisterParams(model_name="a b"), gpus=0)


def test_bad_yaml_names_its_path(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "batchSize: [\n")
    with pytest.raises(BadRequest, match=r"model-config\.yaml: invalid YAML") as caught:
        resolve_spec(folder, gpus=0)
    assert str(folder) in caught.value.message


def test_model_metrics_come_from_the_models_own_metrics_config(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "jupyter_serve:\n  metricsConfig: metrics.yaml\n")
    (folder / "metrics.yaml").write_text(
        "model_metrics:\n  counter:\n    - {name: Tokens, unit: count, dimensions: [ModelName]}\n"
    )
    own = {"name": "Tokens", "unit": "count", "dimensions": ["ModelName"], "type": "counter"}
    assert resolve_spec(folder).model_metrics == (own,)
    server = ({"name": "Server", "unit": "ms", "dimensions": [], "type": "gauge"},)
    plain = model_folder(tmp_path / "plain")
    assert resolve_spec(plain, defaults=ServerDefaults(model_metrics=server)).model_metrics == (
        server
    )


def test_a_models_metrics_config_must_be_inside_its_folder(tmp_path: Path) -> None:
    (tmp_path / "outside.yaml").write_text("model_metrics: {}\n")
    folder = model_folder(tmp_path, "jupyter_serve:\n  metricsConfig: ../outside.yaml\n")
    with pytest.raises(BadRequest, match="metricsConfig must name a file in the model folder"):
        resolve_spec(folder)
