"""A real worker process end to end: load, batch input, context, output, failures, metrics.

Most tests share one worker whose function handler picks a behaviour from the
first request's ``x-do`` header; sharing it also proves the worker keeps serving
after every kind of failed batch.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from worker_harness import WorkerProcess, only_result, request, write_model

from jupyter_serve.wire.protocol import (
    InferenceRequest,
    Kind,
    Parameter,
    ProtocolError,
    decode_results,
)
from jupyter_serve.worker.service import LoadSpec

BEHAVIOURS = """
import os
from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes
from ts.utils.util import PredictionException

LOADED = []
CACHED = []


def handle(data, context):
    if data is None:
        LOADED.append(dict(context.request_ids))
        CACHED.append(
            context.metrics.add_metric_to_cache("InitDefined", "ms", ["Kind"], MetricTypes.GAUGE)
        )
        context.metrics.add_counter("InitializeCallCount", 1)
        try:  # declared by the load's model_metrics, when it has them
            context.metrics.get_metric("Declared", MetricTypes.GAUGE).add_or_update(3, ["init"])
        except KeyError:
            pass
        return None
    return ACTIONS[context.get_request_header(0, "x-do") or "echo"](data, context)


def describe(value):
    if isinstance(value, (bytes, bytearray)):
        return [type(value).__name__, value.hex()]
    return [type(value).__name__, value]


def echo(data, context):
    return [{name: describe(value) for name, value in row.items()} for row in data]


def headers(data, context):
    return [context.get_all_request_header(i) for i in range(len(data))]


def ctx(data, context):
    return [
        {
            "model_name": context.model_name,
            "system_properties": context.system_properties,
            "manifest": context.manifest,
            "yaml": context.model_yaml_config,
            "request_ids": {str(k): v for k, v in context.request_ids.items()},
            "request_id": context.get_request_id(i),
            "sequence_id": context.get_sequence_id(i),
            "loaded_with": LOADED,
            "cwd": os.getcwd(),
        }
        for i in range(len(data))
    ]


def respond(data, context):
    context.set_response_status(507, "Insufficient Storage", 0)
    context.set_response_content_type(0, "text/plain")
    context.set_response_header(0, "dummy", "1")
    return ["Invalid response"] + [{"ok": True}] * (len(data) - 1)


def outputs(data, context):
    return [b"\\x00\\xff", bytearray(b"ab"), "h\\u00e9llo", None, {"k": [1, 2]}]


def metrics(data, context):
    m = context.metrics
    m.add_counter("Loops", 2, idx=1)
    m.add_time("Step", 1.5)
    m.add_size("Size", 3, None, "kB")
    m.add_percent("Util", 50, dimensions=[Dimension("Device", "cpu")])
    custom = m.add_metric_to_cache("Custom", "count", ["Kind"], MetricTypes.HISTOGRAM)
    custom.add_or_update(7, ["a"])
    CACHED[0].add_or_update(4.5, ["b"], request_id=context.get_request_id(0))
    return ["ok"] * len(data)


def metrics_then_fail(data, context):
    context.metrics.add_counter("Lost", 1)
    raise ValueError("after a metric")


def printer(data, context):
    print("hello from the handler")
    return ["printed"] * len(data)


def fail(data, context):
    raise ValueError("handler bug")


def memory(data, context):
    raise MemoryError()


def prediction_exception(data, context):
    raise PredictionException("custom message", 599)


def not_a_list(data, context):
    return {"a": 1}


def short(data, context):
    return data[:-1]


def unencodable(data, context):
    return [object() for _ in data]


ACTIONS = {name: value for name, value in globals().items() if callable(value)}
"""

YAML_CONFIG = {"minWorkers": 1, "handler": {"threshold": 0.5}}


DECLARED = {"name": "Declared", "unit": "count", "dimensions": ["Stage"], "type": "gauge"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models") / "behaviours"
    return write_model(folder, {"behaviours.py": BEHAVIOURS}, handler="behaviours.py")


@pytest.fixture(scope="module")
def worker(model_dir: Path) -> Iterator[WorkerProcess]:
    with WorkerProcess() as process:
        reply = process.load(
            model_dir,
            handler="",  # the manifest's
            gpu_id=3,
            batch_size=4,
            limit_max_image_pixels=False,
            server_version="9.9",
            model_yaml_config=YAML_CONFIG,
            model_metrics=[DECLARED],
        )
        assert reply.kind is Kind.RESULT, reply.header
        process.load_reply = reply  # type: ignore[attr-defined]
        yield process


def do(action: str, request_id: str = "r0", **kwargs: Any) -> InferenceRequest:
    headers = {"x-do": action, **kwargs.pop("headers", {})}
    return request(request_id, headers=headers, **kwargs)


# ---- load --------------------------------------------------------------------------


def test_load_answers_200_with_the_worker_pid(worker: WorkerProcess) -> None:
    header = worker.load_reply.header  # type: ignore[attr-defined]
    loaded = {"status": 200, "message": "loaded", "pid": worker.process.pid}
    assert {key: header[key] for key in loaded} == loaded


def test_function_handler_was_called_with_none_and_a_requestless_context(
    worker: WorkerProcess,
) -> None:
    [info] = worker.json_bodies(do("ctx"))
    assert info["loaded_with"] == [{}]


def test_context_carries_model_and_batch_facts(worker: WorkerProcess, model_dir: Path) -> None:
    batch = [do("ctx", "a"), do("ctx", "b", headers={"ts_request_sequence_id": "seq-7"})]
    first, second = worker.json_bodies(*batch)
    assert first["system_properties"] == {
        "model_dir": str(model_dir),
        "gpu_id": 3,
        "batch_size": 4,
        "server_name": "MMS",
        "server_version": "9.9",
        "limit_max_image_pixels": False,
    }
    assert first["model_name"] == "behaviours"
    assert first["manifest"]["model"]["handler"] == "behaviours.py"
    assert first["yaml"] == YAML_CONFIG
    assert first["request_ids"] == {"0": "a", "1": "b"}
    assert (first["request_id"], second["request_id"]) == ("a", "b")
    assert (first["sequence_id"], second["sequence_id"]) == (None, "seq-7")
    assert Path(first["cwd"]).resolve() == model_dir.resolve()


# ---- batch input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("application/json", b'{"a": [1, 2]}', ["dict", {"a": [1, 2]}]),
        ("application/json; charset=utf-8", b"[1]", ["list", [1]]),
        ("application/json", b"{not json", ["bytearray", b"{not json".hex()]),
        ("text/plain", "h\u00e9".encode(), ["str", "h\u00e9"]),
        ("text/csv; charset=latin-1", "h\u00e9".encode("latin-1"), ["str", "h\u00e9"]),
        ("text/plain", b"\xff\xfe\xfa", ["bytearray", "fffefa"]),
        ("image/png", b"\x89PNG", ["bytearray", "89504e47"]),
        ("", b"raw", ["bytearray", b"raw".hex()]),
    ],
)
def test_values_are_decoded_by_content_type(
    worker: WorkerProcess, content_type: str, body: bytes, expected: list[Any]
) -> None:
    [row] = worker.json_bodies(do("echo", body=body, content_type=content_type))
    assert row == {"body": expected}


def test_form_fields_arrive_by_name_in_one_row_per_request(worker: WorkerProcess) -> None:
    form = InferenceRequest(
        "f",
        {"x-do": "echo"},
        (Parameter("data", "image/jpeg", b"\x01\x02"), Parameter("label", "text/plain", b"cat")),
    )
    rows = worker.json_bodies(form, do("echo", "g", body={"n": 1}))
    assert rows == [
        {"data": ["bytearray", "0102"], "label": ["str", "cat"]},
        {"body": ["dict", {"n": 1}]},
    ]


def test_decode_input_request_false_keeps_every_value_raw(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "raw", {"behaviours.py": BEHAVIOURS})
    with WorkerProcess() as process:
        process.load(folder, "behaviours", decode_input_request=False)
        rows = process.json_bodies(
            do("echo", body={"a": 1}), do("echo", "t", body="text", content_type="text/plain")
        )
    assert rows == [
        {"body": ["bytearray", b'{"a": 1}'.hex()]},
        {"body": ["bytearray", b"text".hex()]},
    ]


def test_handler_sees_http_headers_and_parameter_content_types(worker: WorkerProcess) -> None:
    sent = {"x-do": "headers", "explain": "True", "url_path": "v1/chat", "X-Custom": "a b"}
    form = InferenceRequest("h", sent, (Parameter("data", "text/csv", b"1,2"),))
    [headers] = worker.json_bodies(form)
    assert headers == {**sent, "data": {"content-type": "text/csv"}}


def test_describe_command_sets_the_describe_header(worker: WorkerProcess) -> None:
    [result] = worker.results(do("headers"), command="describe")
    assert json.loads(result.body)["describe"] == "True"
    [plain] = worker.json_bodies(do("headers"))
    assert "describe" not in plain


# ---- output ----------------------------------------------------------------------------


def test_per_request_status_content_type_and_headers_pass_through(worker: WorkerProcess) -> None:
    first, second = worker.results(do("respond", "a"), do("respond", "b"))
    assert (first.request_id, first.status, first.reason) == ("a", 507, "Insufficient Storage")
    assert first.content_type == "text/plain"
    assert first.headers == {"dummy": "1"}
    assert first.body == b"Invalid response"
    assert (second.request_id, second.status, second.reason) == ("b", 200, "")
    assert second.content_type is None
    assert second.headers == {}
    assert json.loads(second.body) == {"ok": True}


def test_output_items_are_encoded_as_torchserve_does(worker: WorkerProcess) -> None:
    batch = [do("outputs", f"r{i}") for i in range(5)]
    bodies = [r.body for r in worker.results(*batch)]
    assert bodies == [
        b"\x00\xff",
        b"ab",
        "h\u00e9llo".encode(),
        b"null",
        json.dumps({"k": [1, 2]}, indent=2).encode(),
    ]


def test_handler_prints_go_to_stdout_not_to_the_socket(worker: WorkerProcess) -> None:
    result = only_result(worker.results(do("printer")))
    assert result.body == b"printed"
    assert "hello from the handler" in worker.output()


# ---- whole-batch failures (the worker keeps serving) ---------------------------------------


@pytest.mark.parametrize(
    ("action", "status", "message"),
    [
        ("fail", 503, "Prediction failed"),
        ("memory", 507, "Out of resources"),
        ("prediction_exception", 599, "custom message"),
        ("not_a_list", 503, "Invalid model predict output"),
        ("short", 503, "number of batch response mismatched"),
        ("unencodable", 503, "Unsupported model output data type."),
    ],
)
def test_failed_batch_answers_one_error_and_the_worker_serves_on(
    worker: WorkerProcess, action: str, status: int, message: str
) -> None:
    reply = worker.infer(do(action, "x"), do(action, "y"))
    assert reply.kind is Kind.ERROR
    assert reply.header["status"] == status
    assert reply.header["type"] == "InternalServerException"
    assert reply.header["message"] == message
    assert worker.json_bodies(do("echo", body=[1])) == [{"body": ["list", [1]]}]


def test_handler_exception_traceback_reaches_the_error_and_stderr(worker: WorkerProcess) -> None:
    reply = worker.infer(do("fail"))
    traceback = reply.header["traceback"]
    assert "ValueError: handler bug" in traceback
    assert "behaviours.py" in traceback
    assert "ValueError: handler bug" in worker.errors()


def test_invalid_output_error_explains_what_was_returned(worker: WorkerProcess) -> None:
    reply = worker.infer(do("short", "a"), do("short", "b"))
    assert "returned 1 items for a batch of 2" in reply.header["traceback"]


# ---- requests that cannot be decoded are answered alone (the worker lives on) ----------

DEEP = b"[" * 100_000


def deep(request_id: str, action: str = "ctx") -> InferenceRequest:
    return do(action, request_id, body=DEEP, content_type="application/json")


def assert_rejected(result: Any, request_id: str) -> None:
    assert (result.request_id, result.status) == (request_id, 400)
    assert result.content_type == "application/json"
    error = json.loads(result.body)
    assert (error["code"], error["type"]) == (400, "BadRequestException")
    assert error["message"] == "JSON nests too deeply (input 'body')"


def test_a_bad_request_gets_its_400_and_the_handler_runs_the_rest(worker: WorkerProcess) -> None:
    squeezed = zlib.compress(b"not text")
    zipped = {"body": squeezed, "content_type": "text/plain; charset=zlib"}
    based = {"body": "fine", "content_type": "text/plain; charset=base64"}
    batch = [do("ctx", "a", body={"n": 1}), deep("deep"), do("ctx", "z", **zipped)]
    first, rejected, last = worker.results(*batch)
    assert_rejected(rejected, "deep")
    seen = [json.loads(r.body) for r in (first, last)]
    assert [s["request_ids"] for s in seen] == [{"0": "a", "1": "z"}] * 2
    assert [s["request_id"] for s in seen] == ["a", "z"]
    assert worker.process.poll() is None
    zip_row, error, base_row = worker.json_bodies(
        do("echo", **zipped), deep("deep", "echo"), do("echo", **based)
    )
    # a charset that is no text encoding is ignored: UTF-8, else the raw bytes
    assert zip_row == {"body": ["bytearray", squeezed.hex()]}
    assert base_row == {"body": ["str", "fine"]}
    assert error["code"] == 400


def test_a_batch_of_bad_requests_never_reaches_the_handler(worker: WorkerProcess) -> None:
    reply = worker.infer(deep("x"), deep("y"))
    assert reply.kind is Kind.RESULT
    x, y = decode_results(reply)
    assert_rejected(x, "x")
    assert_rejected(y, "y")
    assert (reply.header["metrics"], reply.header["predict_ms"]) == ([], 0.0)
    assert "Request x rejected: JSON nests too deeply" in worker.errors()
    assert worker.json_bodies(do("echo", body=[2])) == [{"body": ["list", [2]]}]


def test_a_failing_handler_fails_the_others_but_the_bad_request_keeps_its_400(
    worker: WorkerProcess,
) -> None:
    reply = worker.infer(do("fail", "a"), deep("deep", "fail"), do("fail", "b"))
    assert reply.kind is Kind.RESULT
    a, rejected, b = decode_results(reply)
    assert_rejected(rejected, "deep")
    for result, request_id in ((a, "a"), (b, "b")):
        assert (result.request_id, result.status) == (request_id, 503)
        assert result.content_type == "application/json"
        error = {"code": 503, "type": "InternalServerException", "message": "Prediction failed"}
        assert json.loads(result.body) == {**error, "cause": "ValueError: handler bug"}
    assert "ValueError: handler bug" in worker.errors()
    assert worker.process.poll() is None


# ---- metrics -----------------------------------------------------------------------


def test_metrics_recorded_by_the_handler_come_back_with_the_batch(worker: WorkerProcess) -> None:
    reply = worker.infer(do("metrics", "a"), do("metrics", "b"))
    assert reply.kind is Kind.RESULT
    records = {m["name"]: m for m in reply.header["metrics"]}
    model = {"ModelName": "behaviours", "Level": "Model"}
    assert records["Loops"] == {
        "name": "Loops",
        "value": 2.0,
        "unit": "Count",
        "dimensions": model,
        "type": "counter",
        "request_id": "b",
    }
    assert records["Step"]["unit"] == "Milliseconds"
    assert records["Step"]["type"] == "gauge"
    assert records["Step"]["request_id"] == "a,b"
    assert (records["Size"]["unit"], records["Size"]["value"]) == ("Kilobytes", 3.0)
    assert records["Util"]["dimensions"] == {"Device": "cpu", **model}
    assert records["Custom"]["dimensions"] == {"Kind": "a"}
    assert records["Custom"]["type"] == "histogram"
    assert records["InitDefined"]["dimensions"] == {"Kind": "b"}
    assert records["InitDefined"]["request_id"] == "a"


def test_metrics_emitted_by_initialize_come_back_with_the_load(worker: WorkerProcess) -> None:
    """The `model_metrics` the load declared are in the cache before the handler loads, and
    what `initialize` emits (with the model's default dimensions) answers the load."""
    records = worker.load_reply.header["metrics"]  # type: ignore[attr-defined]
    assert [(r["name"], r["dimensions"], r["value"]) for r in records] == [
        ("InitializeCallCount", {"ModelName": "behaviours", "Level": "Model"}, 1.0),
        ("Declared", {"Stage": "init"}, 3.0),
    ]


def test_prediction_time_is_reported_in_metrics_and_header(worker: WorkerProcess) -> None:
    reply = worker.infer(do("echo"))
    [prediction] = [m for m in reply.header["metrics"] if m["name"] == "PredictionTime"]
    assert prediction["type"] == "gauge"
    assert prediction["unit"] == "Milliseconds"
    assert prediction["dimensions"] == {"ModelName": "behaviours", "Level": "Model"}
    assert prediction["value"] == round(reply.header["predict_ms"], 2)  # as TorchServe rounds
    assert prediction["value"] >= 0


def test_metrics_of_a_failed_batch_do_not_leak_into_the_next(worker: WorkerProcess) -> None:
    assert worker.infer(do("metrics_then_fail")).kind is Kind.ERROR
    reply = worker.infer(do("echo"))
    assert [m["name"] for m in reply.header["metrics"]] == ["PredictionTime"]


# ---- torch -----------------------------------------------------------------------------

TENSOR_HANDLER = """
import torch


def handle(data, context):
    if data is None:
        return None
    return [torch.arange(3), torch.get_num_threads()]
"""


def test_tensor_output_is_torch_saved_and_torch_threads_are_set(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import io

    folder = write_model(tmp_path / "tensor", {"tensor_handler.py": TENSOR_HANDLER})
    with WorkerProcess("--torch-threads", "1") as process:
        assert process.load(folder, "tensor_handler:handle").kind is Kind.RESULT
        tensor, threads = process.results(request("a"), request("b"))
    assert torch.equal(torch.load(io.BytesIO(tensor.body)), torch.arange(3))
    assert json.loads(threads.body) == 1


# ---- failed loads (the worker exits 1) -------------------------------------------------


FAILING_INIT = """
class Broken:
    def initialize(self, context):
        raise RuntimeError("no weights in " + context.system_properties["model_dir"])

    def handle(self, data, context):
        return data
"""

OOM_INIT = """
def handle(data, context):
    if data is None:
        raise MemoryError("model too big")
    return data
"""


def load_and_exit(folder: Path, handler: str) -> tuple[dict[str, Any], int, str]:
    with WorkerProcess() as process:
        reply = process.load(folder, handler)
        assert reply.kind is Kind.ERROR
        code = process.wait()
        return reply.header, code, process.errors()


def test_initialize_error_fails_the_load_naming_file_and_entry_point(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "broken", {"broken.py": FAILING_INIT})
    header, code, stderr = load_and_exit(folder, "broken.py")
    assert code == 1
    assert header["status"] == 500
    assert header["type"] == "InternalServerException"
    assert str(folder / "broken.py") + ":Broken.initialize(context)" in header["message"]
    assert "\n" not in header["message"]
    assert f"RuntimeError: no weights in {folder}" in header["traceback"]
    assert 'broken.py", line 4, in initialize' in header["traceback"]
    assert "RuntimeError: no weights" in stderr


def test_memory_error_at_load_answers_507(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "oom", {"oom.py": OOM_INIT})
    header, code, _ = load_and_exit(folder, "oom")
    assert (header["status"], code) == (507, 1)
    assert "MemoryError: model too big" in header["traceback"]


def test_missing_dependency_is_reported_not_masked(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "dep", {"needs_dep.py": "import not_installed_dep_x\n"})
    header, code, _ = load_and_exit(folder, "needs_dep.py")
    assert (header["status"], code) == (500, 1)
    assert "No module named 'not_installed_dep_x'" in header["message"]
    assert f"handler file {folder / 'needs_dep.py'}" in header["message"]
    assert "needs_dep.py" in header["traceback"]


def test_register_time_handler_overrides_the_manifest(tmp_path: Path) -> None:
    files = {"real.py": "def handle(data, context):\n    return data and ['real']\n"}
    folder = write_model(tmp_path / "override", files, handler="missing.py")
    with WorkerProcess() as process:
        assert process.load(folder, "real.py").kind is Kind.RESULT
        assert only_result(process.results(request())).body == b"real"
        assert process.close() == 0


def test_unknown_handler_fails_the_load(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "empty", {}, handler="nowhere.py")
    header, code, _ = load_and_exit(folder, "")
    assert (header["status"], code) == (500, 1)
    assert "'nowhere' not found" in header["message"]


def test_result_frames_decode_to_the_requests_in_order(worker: WorkerProcess) -> None:
    reply = worker.infer(*(do("echo", f"id{i}", body=[i]) for i in range(3)))
    assert [r.request_id for r in decode_results(reply)] == ["id0", "id1", "id2"]


def test_load_spec_takes_the_launch_settings_with_defaults() -> None:
    plain = LoadSpec.from_header({"model_dir": "/m"})
    assert (plain.sys_path, plain.env, plain.torch_threads) == ((), {}, None)
    header = {"model_dir": "/m", "sys_path": ["/deps"], "env": {"A": "1", "B": None}}
    given = LoadSpec.from_header({**header, "torch_threads": 2})
    assert (given.sys_path, given.env, given.torch_threads) == (
        ("/deps",),
        {"A": "1", "B": None},
        2,
    )
    with pytest.raises(ProtocolError, match="Bad load header"):
        LoadSpec.from_header({"model_dir": "/m", "torch_threads": "many"})
