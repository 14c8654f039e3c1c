"""Tests for jupyter_serve.server.ts_config: Java properties, TorchServe keys, load_models, env."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from jupyter_serve.server.models import ServerDefaults
from jupyter_serve.server.ts_config import (
    TorchServeConfig,
    TorchServeConfigError,
    apply_env_overrides,
    format_properties,
    load_ts_config,
    parse_load_models,
    parse_properties,
    read_properties,
)


def write(tmp_path: Path, text: str, name: str = "config.properties") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="latin-1")
    return path


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> TorchServeConfig:
    return load_ts_config(write(tmp_path, text), env or {})


def test_separators_and_comments() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "equals=1\n"
        "colon: 2\n"
        "space   3\n"
        "  indented = 4  \n"
        "empty=\n"
        "bare\n"
        "url=http://host:8080/x=y\n"
    )
    assert parse_properties(text) == {
        "equals": "1",
        "colon": "2",
        "space": "3",
        "indented": "4  ",
        "empty": "",
        "bare": "",
        "url": "http://host:8080/x=y",
    }


def test_continuations_join_lines_and_drop_indentation() -> None:
    text = "list=a,\\\n    b,\\\n\tc\n# comment \\\nnext=1\nend=x\\\\\nlast=2\n"
    assert parse_properties(text) == {"list": "a,b,c", "next": "1", "end": "x\\", "last": "2"}


def test_continuation_into_a_hash_line_keeps_it_as_value() -> None:
    assert parse_properties("key=a\\\n  #b\n") == {"key": "a#b"}


def test_continuation_at_end_of_file() -> None:
    assert parse_properties("key=a\\") == {"key": "a"}


def test_escapes_in_keys_and_values() -> None:
    text = "a\\=b\\:c\\ d=v\\tw\\nx\\u00e9\\q\n"
    assert parse_properties(text) == {"a=b:c d": "v\tw\nx\u00e9q"}


def test_last_duplicate_wins() -> None:
    assert parse_properties("k=1\nk=2\n") == {"k": "2"}


def test_read_properties_reads_latin1_files(tmp_path: Path) -> None:
    path = tmp_path / "config.properties"
    path.write_bytes(b"name=caf\xe9\n")
    assert read_properties(path) == {"name": "caf\u00e9"}


def test_load_maps_torchserve_keys_to_typed_fields(tmp_path: Path) -> None:
    models = '{"mnist": {"1.0": {"defaultVersion": true, "marName": "mnist.mar", "batchSize": 4}}}'
    config = load(
        tmp_path,
        f"model_store={tmp_path}\n"
        "load_models=mnist.mar,squeeze=squeezenet.mar\n"
        f"models={models}\n"
        "number_of_gpu=0\n"
        "default_workers_per_model=2\n"
        "job_queue_size=50\n"
        "max_request_size=1000\n"
        "max_response_size=2000\n"
        "default_response_timeout=30\n"
        "default_startup_timeout=45\n"
        "unregister_model_timeout=60\n"
        "install_py_dep_per_model=true\n"
        "allowed_urls=file://.*, https://models\\\\.example/.*\n"
        "limit_max_image_pixels=false\n"
        "decode_input_request=FALSE\n"
        "enable_model_api=true\n"
        "service_envelope=kserve\n",
    )
    assert config.model_store == str(tmp_path)
    assert config.load_models == ((None, "mnist.mar"), ("squeeze", "squeezenet.mar"))
    assert config.models == {
        "mnist": {"1.0": {"defaultVersion": True, "marName": "mnist.mar", "batchSize": 4}}
    }
    assert (config.number_of_gpu, config.default_workers_per_model) == (0, 2)
    assert (config.job_queue_size, config.max_request_size, config.max_response_size) == (
        50,
        1000,
        2000,
    )
    assert config.default_response_timeout == 30.0
    assert config.default_startup_timeout == 45.0
    assert config.unregister_model_timeout == 60.0
    assert config.install_py_dep_per_model is True
    assert config.allowed_urls == ("file://.*", "https://models\\.example/.*")
    assert config.limit_max_image_pixels is False
    assert config.decode_input_request is False
    assert config.enable_model_api is True
    assert config.service_envelope == "kserve"
    assert config.server_defaults().service_envelope == "kserve"
    assert config.unknown == ()
    assert config.properties["job_queue_size"] == "50"


def test_unset_keys_are_none(tmp_path: Path) -> None:
    config = load(tmp_path, "# nothing\n")
    assert config == TorchServeConfig()
    assert config.model_store is None
    assert config.load_models is None
    assert config.allowed_urls is None


def test_unknown_keys_are_listed(tmp_path: Path) -> None:
    config = load(tmp_path, "metrics_mode=prometheus\ncors_allowed_origin=*\njob_queue_size=1\n")
    assert config.unknown == ("cors_allowed_origin",)


def test_metrics_config_is_a_path_from_the_working_directory_as_in_torchserve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    text = "metrics_config=examples/custom_metrics/metrics.yaml\nmodel_metrics_auto_detect=true\n"
    config = load(tmp_path, text)
    assert config.metrics_config == str(tmp_path / "examples" / "custom_metrics" / "metrics.yaml")
    assert config.model_metrics_auto_detect is True


def test_token_setting_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="jupyter_serve.server.ts_config"):
        config = load(
            tmp_path,
            "disable_token_authorization=true\n"
            "inference_address=http://0.0.0.0:8080\n"
            "metrics_address=http://0.0.0.0:8082\n",
        )
    assert config.unknown == ()
    levels = {
        record.getMessage().split(":")[1].split()[0]: record.levelno for record in caplog.records
    }
    assert levels == {
        "disable_token_authorization": logging.WARNING,
        "inference_address": logging.INFO,
        "metrics_address": logging.INFO,
    }


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("job_queue_size=many", "job_queue_size"),
        ("default_workers_per_model=-1", "default_workers_per_model"),
        ("default_response_timeout=1.5", "default_response_timeout"),
        ("enable_model_api=yes", "enable_model_api"),
        ("models={not json", "models"),
        ('models={"m": {"1.0": 3}}', "models"),
        ("models=[]", "models"),
        ("allowed_urls=file://.*,http(", "allowed_urls"),
        ("load_models==x.mar", "load_models"),
        ("model_snapshot={not json", "model_snapshot"),
        ('model_snapshot={"name": "x"}', "model_snapshot"),
        ("model_snapshot=[]", "model_snapshot"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(TorchServeConfigError, match=key):
        load(tmp_path, text + "\n")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("standalone", []),
        ("STANDALONE", []),
        ("", []),
        ("a.mar", [(None, "a.mar")]),
        ("a.mar, b.mar,", [(None, "a.mar"), (None, "b.mar")]),
        ("name=a.mar", [("name", "a.mar")]),
        ("n1=https://x/a.mar,b.mar", [("n1", "https://x/a.mar"), (None, "b.mar")]),
    ],
)
def test_parse_load_models(value: str, expected: list[tuple[str | None, str]]) -> None:
    assert parse_load_models(value) == expected


def test_load_models_all_lists_the_model_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    for name in ("b.mar", "a.tar.gz", ".hidden.mar", "notes.txt"):
        (store / name).write_bytes(b"")
    (store / "folder_model").mkdir()
    expected = [(None, "a.tar.gz"), (None, "b.mar"), (None, "folder_model")]
    assert parse_load_models("all", store) == expected
    config = load(tmp_path, f"model_store={store}\nload_models=ALL\n")
    assert config.load_models == tuple(expected)


def test_load_models_all_needs_a_model_store(tmp_path: Path) -> None:
    with pytest.raises(TorchServeConfigError, match="model_store"):
        parse_load_models("all")
    with pytest.raises(TorchServeConfigError, match="model_store"):
        parse_load_models("all", tmp_path / "missing")


def test_env_overrides_need_enable_envvars_config() -> None:
    env = {"TS_JOB_QUEUE_SIZE": "7", "JOB_QUEUE_SIZE": "9"}
    assert apply_env_overrides({"job_queue_size": "5"}, env) == {"job_queue_size": "5"}
    enabled = {"job_queue_size": "5", "enable_envvars_config": "true"}
    assert apply_env_overrides(enabled, env)["job_queue_size"] == "7"


def test_env_cannot_switch_env_overrides_on() -> None:
    env = {"TS_ENABLE_ENVVARS_CONFIG": "true", "TS_JOB_QUEUE_SIZE": "7"}
    assert apply_env_overrides({}, env) == {}


def test_env_allowed_urls_need_use_env_allowed_urls() -> None:
    env = {"TS_ALLOWED_URLS": "https://only/.*"}
    enabled = {"enable_envvars_config": "true", "allowed_urls": "file://.*"}
    assert apply_env_overrides(enabled, env)["allowed_urls"] == "file://.*"
    both = {**enabled, "use_env_allowed_urls": "true"}
    assert apply_env_overrides(both, env)["allowed_urls"] == "https://only/.*"


def test_load_applies_env_overrides(tmp_path: Path) -> None:
    text = "enable_envvars_config=true\njob_queue_size=5\n"
    config = load(tmp_path, text, {"TS_JOB_QUEUE_SIZE": "7", "TS_ENABLE_MODEL_API": "true"})
    assert config.job_queue_size == 7
    assert config.enable_model_api is True


def test_server_defaults_take_the_per_model_defaults(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "job_queue_size=10\ndefault_response_timeout=30\ndefault_startup_timeout=5\n"
        "limit_max_image_pixels=false\ndefault_workers_per_model=4\n",
    )
    defaults = config.server_defaults(ServerDefaults(batch_size=8))
    assert defaults == ServerDefaults(
        batch_size=8,
        job_queue_size=10,
        response_timeout=30.0,
        startup_timeout=5.0,
        limit_max_image_pixels=False,
    )
    assert TorchServeConfig().server_defaults() == ServerDefaults()


def test_model_snapshot_is_kept_whole(tmp_path: Path) -> None:
    snapshot = '{"name": "x", "models": {"m": {"1.0": {"marName": "m.mar", "minWorkers": 2}}}}'
    config = load(tmp_path, f"model_snapshot={snapshot}\n")
    assert config.model_snapshot == json.loads(snapshot)
    assert "model_snapshot" not in config.unknown


def test_format_properties_reads_back_to_the_same_entries() -> None:
    entries = {
        "model_snapshot": '{"models": {"m": {"1.0": {"marName": "m.mar"}}}}',
        "path": "C:\\models\\store",
        "spaced": "  leading and trailing  ",
        "multi": "line one\nline two\ttab",
        "accents": "modèle №1",
        "odd key=x": "value: # not a comment",
        "empty": "",
    }
    text = format_properties(entries, comment="written by a test\nsecond line")
    assert text.startswith("# written by a test\n# second line\n")
    assert parse_properties(text) == entries
    assert text.isascii()  # Java reads properties as ISO-8859-1: \\uXXXX for the rest
