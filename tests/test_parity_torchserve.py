"""Differential test: the same requests to real TorchServe 0.12 and to `jupyter serve`.

Both servers start on the same model store (bench/handlers/echo_handler.py packed as
`echo.mar`, which answers each request's body or form field `data`). CASES is walked in
order, each request sent to TorchServe (its inference, management or metrics port) and to
`{base_url}serve/` of `jupyter serve`; both must give the same status and, for a JSON
answer, the same JSON (describe answers without the volatile worker fields
startTime/pid/memoryUsage/id), else the same bytes. The order matters (registrations
change later listings), so it is fixed and the same for both servers, and every mismatch
is collected before one assertion shows them all.

DEVIATIONS lists, with the reason, the few answers jupyter_serve gives on purpose
differently; each one still checks what both servers answer there, so a deviation that
disappears or changes shape fails too.

Marked `torchserve`: `-m "not torchserve"` or `JUPYTER_SERVE_SKIP_TORCHSERVE=1` skips it
on a developer's machine; with `CI=true` it always runs (tests/torchserve_process.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from mar_builder import build_handler_mar
from serve_process import TOKEN, ServeProcess
from torchserve_process import ROOT, TorchServeProcess, free_port, skip_reason, torchserve_bin

pytestmark = [
    pytest.mark.torchserve,
    pytest.mark.skipif(skip_reason() is not None, reason=f"TorchServe: {skip_reason()}"),
]

ECHO = ROOT / "bench" / "handlers" / "echo_handler.py"
VOLATILE_WORKER_KEYS = frozenset({"startTime", "pid", "memoryUsage", "id"})
MAX_REQUEST_SIZE = 6553500  # the default of both (TorchServe's and ServeApp.max_request_size)
BOUNDARY = "parity-boundary"
FORM = f"multipart/form-data; boundary={BOUNDARY}"
SHOWN = 400  # characters of an answer shown in a mismatch
OURS_AUTH = {"Authorization": f"token {TOKEN}"}


@dataclass(frozen=True)
class Case:
    """One request: `api` names TorchServe's port (ours serves all three under serve/)."""

    api: str  # "inference", "management" or "metrics"
    method: str
    path: str
    params: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """Method, port, path and query, and the body's size and type if it has one."""
        query = f"?{httpx.QueryParams(self.params)}" if self.params else ""
        kind = "".join(f", {value}" for value in self.headers.values())
        body = f" [{len(self.body)} bytes{kind}]" if self.body is not None else ""
        return f"{self.method} {self.api}:/{self.path}{query}{body}"


def management(method: str, path: str, **params: str) -> Case:
    return Case("management", method, path, params)


def inference(
    method: str, path: str, body: bytes | None = None, content_type: str | None = None,
    **params: str,
) -> Case:  # fmt: skip
    headers = {"Content-Type": content_type} if content_type else {}
    return Case("inference", method, path, params, body, headers)


def multipart(**fields: bytes) -> bytes:
    """A multipart/form-data body (boundary BOUNDARY) with these fields."""
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        + value + b"\r\n"
        for name, value in fields.items()
    ]  # fmt: skip
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


ECHO_REGISTER = {"url": "echo.mar", "batch_size": "1", "max_batch_delay": "5",
                 "initial_workers": "1", "synchronous": "true"}  # fmt: skip
CASES = [
    management("POST", "models", **ECHO_REGISTER),
    inference("GET", "ping"),
    management("GET", "models"),
    management("GET", "models", limit="0"),
    management("GET", "models", limit="-1"),
    management("GET", "models", limit="abc"),
    management("GET", "models", next_page_token="abc"),
    management("GET", "models", next_page_token="-1"),
    management("GET", "models", next_page_token="5"),
    management("GET", "models", limit="1", next_page_token="1"),
    management("GET", "models/echo"),
    management("GET", "models/echo/all"),
    management("GET", "models/echo/1.0"),
    management("GET", "models/nope"),
    management("GET", "models/nope/1.0"),
    management("GET", "models/echo/9.9"),
    management("GET", "models/echo", customized="abc"),
    management("GET", "models/echo", customized="true"),
    management("PUT", "models/echo", min_worker="abc"),
    management("PUT", "models/echo", min_worker="-1"),
    management("PUT", "models/echo", max_worker="-1"),
    management("PUT", "models/echo", min_worker="2", max_worker="1"),
    management("PUT", "models/echo", synchronous="abc"),
    management("PUT", "models/echo", timeout="abc"),
    management("PUT", "models/echo", number_gpu="abc"),
    management("PUT", "models/nope", min_worker="1"),
    management("PUT", "models/echo/9.9", min_worker="1"),
    management("PUT", "models/echo/9.9/set-default"),
    management("PUT", "models/nope/1.0/set-default"),
    management("PUT", "models/echo/1.0/set-default"),
    management("DELETE", "models/nope"),
    management("DELETE", "models/echo/9.9"),
    management("POST", "models"),
    management("POST", "models", url=""),
    management("POST", "models", url="nope.mar"),
    management("POST", "models", url="echo.mar"),
    management("POST", "models", url="echo.mar", batch_size="abc"),
    management("POST", "models", url="echo.mar", initial_workers="abc", model_name="e3"),
    management("POST", "models", url="echo.mar", initial_workers="-1", model_name="e4"),
    management("POST", "models", url="echo.mar", response_timeout="abc", model_name="e5"),
    management("POST", "models", url="echo.mar", max_batch_delay="abc", model_name="e6"),
    management("POST", "models", url="echo.mar", runtime="bogus", model_name="e7"),
    management("POST", "models", url="echo.mar", synchronous="abc", model_name="e8"),
    management("POST", "models", url="../echo.mar"),
    management("POST", "models", url="/etc/passwd"),
    management("POST", "models", url="echo.mar", model_name="e9", initial_workers="0"),
    management("GET", "models/e9"),
    management("GET", "models"),
    management("GET", "models", limit="1"),
    management("GET", "models", limit="1", next_page_token="1"),
    inference("POST", "predictions/e9", b"x"),
    management("DELETE", "models/e9"),
    management("GET", "models"),
    management("PATCH", "models"),
    management("DELETE", "models"),
    management("GET", "nope"),
    management("POST", "models/echo"),
    management("GET", "models/echo/1.0/extra"),
    inference("POST", "predictions/nope", b"x"),
    inference("POST", "predictions/echo/9.9", b"x"),
    inference("POST", "predictions/echo", b"hello"),
    inference("POST", "predictions/echo", b'{"a": [1, 2.5, "b"]}', "application/json"),
    inference("POST", "predictions/echo", b"plain", "text/plain"),
    inference("POST", "predictions/echo", multipart(data=b"form value"), FORM),
    inference("POST", "predictions/echo", b"x" * (MAX_REQUEST_SIZE + 1)),
    inference("GET", "predictions/echo"),
    inference("PUT", "predictions/echo", b"x"),
    inference("DELETE", "predictions/echo"),
    inference("POST", "predictions/echo/1.0", b"v"),
    inference("POST", "predictions/echo/1.0/extra/path", b"v"),
    inference("POST", "predictions", b"x"),
    inference("POST", "explanations/echo", b"x"),
    inference("POST", "explanations/nope", b"x"),
    inference("POST", "invocations", b"x", model_name="echo"),
    inference("POST", "invocations", b"x"),
    inference("POST", "invocations", b"x", model_name="nope"),
    inference("POST", "models/echo/invoke", b"x"),
    inference("POST", "models/nope/invoke", b"x"),
    inference("GET", "nope"),
    inference("GET", ""),
    inference("POST", "ping"),
    inference("DELETE", "ping"),
    management("OPTIONS", ""),
    inference("OPTIONS", ""),
    Case("metrics", "GET", "metrics"),
    # Last: TorchServe registers these and jupyter_serve refuses them (DEVIATIONS), so
    # from here on the two servers' model lists differ.
    management("POST", "models", url="echo.mar", batch_size="0", model_name="e2"),
    management("POST", "models", url="echo.mar", model_name="bad/name"),
    management("POST", "models", url="echo.mar", model_name="bad name"),
]


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def show(self) -> str:
        """Status and body on one line (JSON compacted), cut at SHOWN characters."""
        value = self.json()
        text = self.body.decode(errors="replace") if value is None else json.dumps(value)
        return f"{self.status} {text[:SHOWN]}{' ...' if len(text) > SHOWN else ''}"


Check = Callable[[Answer, Answer], list[str]]  # (TorchServe's, ours) -> problems


def without_volatile(value: Any) -> Any:
    """A describe answer without each worker's startTime/pid/memoryUsage/id."""
    if isinstance(value, list):
        return [without_volatile(item) for item in value]
    if isinstance(value, dict):
        return {
            key: [{k: v for k, v in w.items() if k not in VOLATILE_WORKER_KEYS} for w in item]
            if key == "workers" and isinstance(item, list)
            else without_volatile(item)
            for key, item in value.items()
        }
    return value


def same(theirs: Answer, ours: Answer) -> list[str]:
    """The default: same status, and the same JSON (or, if not JSON, the same bytes)."""
    problems = [] if theirs.status == ours.status else ["status differs"]
    if theirs.json() is not None or ours.json() is not None:
        if without_volatile(theirs.json()) != without_volatile(ours.json()):
            problems.append("JSON differs")
    elif theirs.body != ours.body:
        problems.append("body differs")
    return problems


def statuses(theirs_status: int, ours_status: int, ours_type: str) -> Check:
    """TorchServe answers `theirs_status`; ours `ours_status` with error type `ours_type`."""

    def check(theirs: Answer, ours: Answer) -> list[str]:
        problems = []
        if theirs.status != theirs_status:
            problems.append(f"TorchServe's status is not {theirs_status}")
        if (ours.status, (ours.json() or {}).get("type")) != (ours_status, ours_type):
            problems.append(f"ours is not {ours_status} {ours_type}")
        return problems

    return check


def ours_adds(key: str) -> Check:
    """Same status and JSON, except ours has one more `key`."""

    def check(theirs: Answer, ours: Answer) -> list[str]:
        mine = dict(ours.json() or {})
        if mine.pop(key, None) is None:
            return [f"ours has no {key!r}"]
        return same(theirs, Answer(ours.status, json.dumps(mine).encode()))

    return check


def openapi_covers(theirs: Answer, ours: Answer) -> list[str]:
    """Both 200 OpenAPI documents of one version; ours has every path TorchServe's has."""
    mine, their = ours.json() or {}, theirs.json() or {}
    problems = [] if (theirs.status, ours.status) == (200, 200) else ["not both 200"]
    if their.get("openapi") != mine.get("openapi"):
        problems.append("openapi versions differ")
    missing = sorted(set(their.get("paths", {})) - set(mine.get("paths", {})))
    return problems + ([f"ours lacks paths {missing}"] if missing else [])


def both_expose(metric: str) -> Check:
    def check(theirs: Answer, ours: Answer) -> list[str]:
        problems = [] if theirs.status == ours.status == 200 else ["not both 200"]
        for name, answer in (("TorchServe", theirs), ("ours", ours)):
            if metric.encode() not in answer.body:
                problems.append(f"{name} lacks {metric}")
        return problems

    return check


@dataclass(frozen=True)
class Deviation:
    reason: str
    check: Check


DEVIATIONS = {
    "PUT management:/models/echo?min_worker=-1": Deviation(
        "TorchServe fails with a 500 (IndexOutOfBoundsException); a client's mistake is a "
        "400 here, never a 500",
        statuses(500, 400, "BadRequestException"),
    ),
    f"POST inference:/predictions/echo [{MAX_REQUEST_SIZE + 1} bytes]": Deviation(
        "both refuse the body with a 413; TorchServe's Netty aggregator answers it with an "
        "empty body, ours with TorchServe's error JSON, as every other error",
        statuses(413, 413, "RequestEntityTooLargeException"),
    ),
    "POST management:/models?url=echo.mar&batch_size=0&model_name=e2": Deviation(
        "TorchServe registers a batch size of 0, which can never form a batch",
        statuses(200, 400, "BadRequestException"),
    ),
    "POST management:/models?url=echo.mar&model_name=bad%2Fname": Deviation(
        "TorchServe registers a name with '/', which its own model URLs cannot address and "
        "which would be a path in the work folder",
        statuses(200, 400, "InvalidModelException"),
    ),
    "POST management:/models?url=echo.mar&model_name=bad+name": Deviation(
        "TorchServe registers a name with a space, which breaks URL routes and file paths",
        statuses(200, 400, "InvalidModelException"),
    ),
    "POST management:/models?url=%2Fetc%2Fpasswd": Deviation(
        "same status, type and message; ours adds a 'cause' saying local paths outside "
        "the model store are refused (ServeApp.allow_local_paths)",
        ours_adds("cause"),
    ),
    "OPTIONS management:/": Deviation(
        "both answer an OpenAPI 3.0.1 document, ours describing jupyter_serve (its info, "
        "its extra routes): compare the version and that every TorchServe path is ours too",
        openapi_covers,
    ),
    "OPTIONS inference:/": Deviation("as OPTIONS on the management API", openapi_covers),
    "GET metrics:/metrics": Deviation(
        "other metrics (e.g. host and worker ones) differ by server and moment: compare "
        "the status and that the request counter is exposed by both",
        both_expose("ts_inference_requests_total"),
    ),
}


@dataclass(frozen=True)
class Servers:
    """Where to send a Case: TorchServe's three ports, and ours."""

    torchserve: dict[str, str]  # api -> base URL
    ours: str  # {url}serve/


def torchserve_config(folder: Path, store: Path, ports: dict[str, int]) -> Path:
    """config.properties: loopback ports, Prometheus metrics, its own gRPC ports."""
    lines = [f"{api}_address=http://127.0.0.1:{port}" for api, port in ports.items()]
    lines += ["metrics_mode=prometheus", f"model_store={store}"]
    lines += [f"grpc_{api}_port={free_port()}" for api in ("inference", "management")]
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.properties"
    config.write_text("\n".join(lines) + "\n")
    return config


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """TorchServe 0.12 and `jupyter serve` on one model store holding echo.mar."""
    work = tmp_path_factory.mktemp("parity")
    store = work / "store"
    store.mkdir()
    build_handler_mar(store, "echo", ECHO.read_text())
    bin_dir = torchserve_bin(work / "venv.log")
    ports = {api: free_port() for api in ("inference", "management", "metrics")}
    config = torchserve_config(work / "torchserve", store, ports)
    args = ["--disable-token-auth", "--enable-model-api", "--model-store", str(store),
            "--ts-config", str(config)]  # fmt: skip
    torchserve = TorchServeProcess(work / "torchserve", bin_dir, args, {})
    try:
        ours = ServeProcess(work / "jupyter", [f"--model-store={store}", "--ncs"])
        try:
            torchserve.wait_for("Model server started")
            ours.start()
            yield Servers(
                {api: f"http://127.0.0.1:{port}/" for api, port in ports.items()},
                f"{ours.url}serve/",
            )
        finally:
            ours.stop()
    finally:
        torchserve.stop()


def send(client: httpx.Client, url: str, case: Case, headers: dict[str, str]) -> Answer:
    reply = client.request(
        case.method, url + case.path, params=case.params, content=case.body,
        headers={**case.headers, **headers},
    )  # fmt: skip
    return Answer(reply.status_code, reply.content)


def mismatch(case: Case, problems: list[str], theirs: Answer, ours: Answer) -> str:
    deviation = DEVIATIONS.get(case.label)
    why = f"\n    documented deviation: {deviation.reason}" if deviation else ""
    return (
        f"{case.label}: {'; '.join(problems)}{why}\n"
        f"    TorchServe: {theirs.show()}\n    ours:       {ours.show()}"
    )


def test_cases_and_deviations_are_consistent() -> None:
    """Each deviation names exactly one case (a case's label is what DEVIATIONS keys)."""
    labels = [case.label for case in CASES]
    assert {label: labels.count(label) for label in DEVIATIONS} == dict.fromkeys(DEVIATIONS, 1)


def test_jupyter_serve_answers_as_torchserve(servers: Servers) -> None:
    mismatches = []
    with httpx.Client(timeout=120) as client:
        for case in CASES:
            theirs = send(client, servers.torchserve[case.api], case, {})
            ours = send(client, servers.ours, case, OURS_AUTH)
            deviation = DEVIATIONS.get(case.label)
            problems = (deviation.check if deviation else same)(theirs, ours)
            if problems:
                mismatches.append(mismatch(case, problems, theirs, ours))
    assert not mismatches, f"{len(mismatches)} of {len(CASES)} differ:\n" + "\n".join(mismatches)
