"""Tests for the inference routes through jp_fetch, with real workers serving the probe .mar."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from route_models import STREAM, gate, register, release, server_config
from tornado.httpclient import HTTPClientError, HTTPResponse

Fetch = Callable[..., Awaitable[HTTPResponse]]
MAX_REQUEST_SIZE = 4096


def raw() -> dict[str, str]:
    """Headers of a raw body (tornado's client would say form-urlencoded); fresh each time,
    since jp_fetch writes its token into the dict it is given."""
    return {"Content-Type": "application/octet-stream"}


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path, max_request_size=MAX_REQUEST_SIZE)


async def fail(fetch: Fetch, *path: str, **kwargs: Any) -> HTTPResponse:
    """The error response of a request expected to fail."""
    with pytest.raises(HTTPClientError) as caught:
        await fetch(*path, **kwargs)
    assert caught.value.response is not None
    return caught.value.response


def error_json(response: HTTPResponse) -> Any:
    return json.loads(response.body)


def seen(response: HTTPResponse) -> Any:
    assert response.code == 200
    return json.loads(response.body)


async def test_binary_body_comes_back_raw_without_a_content_type(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    payload = bytes(range(256))
    response = await jp_fetch(
        "serve", "predictions", "probe", method="POST", body=payload,
        headers=raw(),
    )  # fmt: skip
    assert response.code == 200
    assert response.body == payload
    assert "Content-Type" not in response.headers  # TorchServe sets none unless the handler does
    uuid.UUID(response.headers["x-request-id"])


async def test_json_body_reaches_the_handler_parsed(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    response = await jp_fetch(
        "serve", "predictions", "probe", method="POST", body=json.dumps({"a": [1, 2]}),
        headers={"Content-Type": "application/json", "X-Mode": "seen"},
    )  # fmt: skip
    info = seen(response)
    assert info["keys"] == ["body"]
    assert info["types"] == {"body": "dict"}
    assert info["row"] == {"body": {"a": [1, 2]}}
    assert info["explain"] == "False"


async def test_text_and_form_bodies_become_parameters(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    text = await jp_fetch(
        "serve", "predictions", "probe", method="POST", body="héllo",
        headers={"Content-Type": "text/plain; charset=utf-8", "X-Mode": "seen"},
    )  # fmt: skip
    assert seen(text)["row"] == {"body": "héllo"}
    form = await jp_fetch(
        "serve", "predictions", "probe", method="POST", body="data=1&target=3",
        headers={"Content-Type": "application/x-www-form-urlencoded", "X-Mode": "seen"},
    )  # fmt: skip
    info = seen(form)
    assert info["keys"] == ["data", "target"]
    assert info["types"] == {"data": "bytearray", "target": "bytearray"}


async def test_multipart_and_raw_echo_return_the_same_bytes(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    payload = b"\x00\x01image-bytes\xff"
    boundary = "XyZ"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="data"; filename="x.bin"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + payload
        + f"\r\n--{boundary}--\r\n".encode()
    )
    multipart = await jp_fetch(
        "serve", "predictions", "probe", method="POST", body=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )  # fmt: skip
    echo = await jp_fetch(
        "serve", "predictions", "probe", method="POST", body=payload, headers=raw()
    )
    assert multipart.body == echo.body == payload


async def test_versions_and_extra_segments_as_url_path(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp, version="1.0")
    await register(jp_serverapp, version="2.0")
    headers = {"X-Mode": "seen"}
    deep = await jp_fetch(
        "serve", "predictions", "probe", "2.0", "v1", "chat", "completion",
        method="POST", body=b"x", headers=headers,
    )  # fmt: skip
    assert seen(deep)["url_path"] == "v1/chat/completion"
    plain = await jp_fetch("serve", "predictions", "probe", "1.0", method="POST", body=b"x",
                           headers=headers)  # fmt: skip
    assert seen(plain)["url_path"] is None


async def test_explanations_set_the_explain_header(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    for path in (("probe",), ("probe", "1.0")):
        response = await jp_fetch(
            "serve", "explanations", *path, method="POST", body=b"x", headers={"X-Mode": "seen"}
        )
        assert seen(response)["explain"] == "True"


async def test_handler_status_content_type_and_headers_pass_through(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    response = await jp_fetch(
        "serve", "predictions", "probe", method="POST", body=b"x", headers={"X-Mode": "headers"}
    )
    assert response.body == b"with headers"
    assert response.headers["Content-Type"] == "text/plain"
    assert response.headers["dummy"] == "1"
    status = await fail(jp_fetch, "serve", "predictions", "probe", method="POST", body=b"x",
                        headers={"X-Mode": "status"})  # fmt: skip
    assert status.code == 507
    assert status.body == b"Invalid response"  # the handler's body, not error JSON
    assert "x-request-id" in status.headers


@pytest.mark.parametrize(
    ("mode", "code", "message"),
    [
        ("raise", 503, "Prediction failed"),
        ("oom", 507, "Out of resources"),
        ("custom", 599, "custom failure"),
    ],
)
async def test_handler_failures_answer_torchserve_error_json(
    jp_fetch: Fetch, jp_serverapp: Any, mode: str, code: int, message: str
) -> None:
    await register(jp_serverapp)
    response = await fail(jp_fetch, "serve", "predictions", "probe", method="POST", body=b"x",
                          headers={"X-Mode": mode})  # fmt: skip
    assert response.code == code
    body = error_json(response)
    assert body["code"] == code
    assert body["message"] == message
    assert body.get("cause") == ("RuntimeError: boom" if mode == "raise" else None)
    assert body["type"] in ("InternalServerException", "PredictionException")
    uuid.UUID(response.headers["x-request-id"])


async def test_unknown_model_and_version_are_404(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    missing = await fail(jp_fetch, "serve", "predictions", "InvalidModel", method="POST", body=b"")
    assert missing.code == 404
    assert error_json(missing) == {
        "code": 404, "type": "ModelNotFoundException", "message": "Model not found: InvalidModel",
    }  # fmt: skip
    version = await fail(jp_fetch, "serve", "predictions", "probe", "1.3.1", method="POST",
                         body=b"")  # fmt: skip
    assert error_json(version) == {
        "code": 404,
        "type": "ModelVersionNotFoundException",
        "message": "Model version: 1.3.1 does not exist for model: probe",
    }
    assert "x-request-id" in version.headers


async def test_a_model_without_workers_is_503(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp, name="idle", workers=0)
    response = await fail(jp_fetch, "serve", "predictions", "idle", method="POST", body=b"x")
    assert response.code == 503
    assert error_json(response) == {
        "code": 503,
        "type": "ServiceUnavailableException",
        "message": 'Model "idle" has no worker to serve inference request. '
        "Please use scale workers API to add workers. If this is a sequence inference, "
        "please check if it is closed, or expired; or exceeds maxSequenceJobQueueSize",
    }


async def test_oversized_body_is_413(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    response = await fail(jp_fetch, "serve", "predictions", "probe", method="POST",
                          body=b"x" * (MAX_REQUEST_SIZE + 1))  # fmt: skip
    assert response.code == 413
    assert error_json(response)["code"] == 413
    ok = await jp_fetch("serve", "predictions", "probe", method="POST",
                        body=b"x" * MAX_REQUEST_SIZE)  # fmt: skip
    assert ok.code == 200


async def test_put_predicts_and_options_describes_the_model(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    put = await jp_fetch(
        "serve", "predictions", "probe", method="PUT", body=b"via put", headers=raw()
    )
    assert put.body == b"via put"
    options = await jp_fetch("serve", "predictions", "probe", method="OPTIONS")
    document = json.loads(options.body)
    assert document["openapi"] == "3.0.1"
    assert "/predictions/probe" in document["paths"]


async def test_every_request_is_counted_in_the_metrics(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    await register(jp_serverapp)
    await jp_fetch("serve", "predictions", "probe", method="POST", body=b"x")
    await fail(jp_fetch, "serve", "predictions", "probe", method="POST", body=b"x",
               headers={"X-Mode": "raise"})  # fmt: skip
    metrics = jp_serverapp.web_app.settings["serve_metrics"]
    host = {"Level": "Host", "Hostname": metrics.hostname}
    labels = {"model_name": "probe", "model_version": "default", "hostname": metrics.hostname}
    assert metrics.value("ts_inference_requests_total", labels) == 2
    assert metrics.value("Requests2XX", host) == 1
    assert metrics.value("Requests5XX", host) == 1


@pytest.mark.parametrize("path", [("predictions", "probe", "1.0", "x"), ("explanations", "p")])
async def test_inference_routes_refuse_requests_without_credentials(
    jp_fetch: Fetch, path: tuple[str, ...]
) -> None:
    for method in ("POST", "GET", "OPTIONS"):
        response = await fail(jp_fetch, "serve", *path, method=method,
                              body=b"" if method == "POST" else None,
                              headers={"Authorization": ""})  # fmt: skip
        assert response.code == 403


async def test_predictions_skip_the_login_cookie_and_the_access_log_of_successes(
    jp_fetch: Fetch, jp_serverapp: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await register(jp_serverapp)
    caplog.set_level("DEBUG")
    ping = await jp_fetch("serve", "ping")  # an ordinary route: jupyter_server's behaviour
    assert "Set-Cookie" in ping.headers
    answer = await jp_fetch("serve", "predictions", "probe", method="POST", body=b"x",
                            headers=raw())  # fmt: skip
    assert answer.code == 200
    assert "Set-Cookie" not in answer.headers  # API clients never send it back
    failed = await fail(jp_fetch, "serve", "predictions", "nope", method="POST", body=b"x",
                        headers=raw())  # fmt: skip
    assert failed.code == 404
    logged = [r.getMessage() for r in caplog.records]
    assert any("GET" in m and "/serve/ping" in m for m in logged)
    assert not any("200 POST" in m and "/serve/predictions/probe" in m for m in logged)
    assert any("404 POST" in m and "/serve/predictions/nope" in m for m in logged)


# ---- streaming (send_intermediate_predict_response) --------------------------------------


@dataclass
class RawResponse:
    """An HTTP/1.1 response read off the socket: status, headers, and the reader for the body."""

    status: int
    headers: dict[str, str]
    reader: asyncio.StreamReader

    async def chunk(self) -> bytes | None:
        """The next chunk of a chunked body exactly as framed on the wire; None at its end."""
        size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
        data = await self.reader.readexactly(size + 2)
        assert data.endswith(b"\r\n")
        return data[:-2] or None

    async def chunks(self) -> list[bytes]:
        found = []
        while (data := await self.chunk()) is not None:
            found.append(data)
        return found

    async def body(self) -> bytes:
        return await self.reader.readexactly(int(self.headers["content-length"]))


@pytest.fixture(params=["token-header", "token-query"])
def post_raw(
    request: pytest.FixtureRequest,
    http_server: Any,
    jp_http_port: int,
    jp_base_url: str,
    jp_auth_header: dict[str, str],
) -> Callable[..., Any]:
    """POST over a plain socket, to see the chunks as the server frames them (`http_server`
    makes the test server accept connections, as `jp_fetch` does). The token goes in the
    header (the lean path, server/http/fastpath.py) or in the query (the full route)."""
    by_header = request.param == "token-header"
    token = jp_auth_header["Authorization"].split()[-1]
    query = "" if by_header else f"?token={token}"

    @asynccontextmanager
    async def post(path: str, body: bytes, **headers: str) -> AsyncIterator[RawResponse]:
        reader, writer = await asyncio.open_connection("127.0.0.1", jp_http_port)
        fields = {
            **(jp_auth_header if by_header else {}),
            "Host": f"127.0.0.1:{jp_http_port}",
            "Content-Type": "text/plain",
            "Content-Length": str(len(body)),
            **headers,
        }
        lines = [f"{name}: {value}" for name, value in fields.items()]
        head = "\r\n".join([f"POST {jp_base_url}serve/{path}{query} HTTP/1.1", *lines, "", ""])
        writer.write(head.encode() + body)
        try:
            status = int((await reader.readline()).split()[1])
            received: dict[str, str] = {}
            while (line := await reader.readline()) != b"\r\n":
                name, _, value = line.decode().partition(":")
                received[name.strip().lower()] = value.strip()
            yield RawResponse(status, received, reader)
        finally:
            writer.close()

    return post


async def test_a_streaming_handler_answers_chunk_by_chunk_as_torchserve(
    jp_serverapp: Any, post_raw: Callable[..., Any], tmp_path: Path
) -> None:
    await register(jp_serverapp, name="echo_stream", source=STREAM)
    fifo = gate(tmp_path)
    async with post_raw("predictions/echo_stream", b"foo", **{"X-Gate": str(fifo)}) as answer:
        assert answer.status == 200
        assert answer.headers["transfer-encoding"] == "chunked"
        assert "content-length" not in answer.headers
        assert answer.headers["content-type"] == "text/plain"
        assert answer.headers["ts_stream_next"] == "true"  # TorchServe's marker, passed on too
        assert await answer.chunk() == b"hello "  # here while the handler waits at its gate
        await release(fifo)
        rest = await answer.chunks()
    chunks = [b"hello ", *rest]
    assert chunks == [b"hello ", b"hello ", b"hello ", b"hello world "]  # 3 intermediate + final
    assert b"".join(chunks) == b"hello hello hello hello world "


async def test_answers_that_do_not_stream_keep_their_content_length(
    jp_serverapp: Any, post_raw: Callable[..., Any]
) -> None:
    await register(jp_serverapp, name="echo_stream", source=STREAM)
    await register(jp_serverapp)
    async with post_raw("predictions/echo_stream", b"x", **{"X-Stream": "no"}) as answer:
        assert "transfer-encoding" not in answer.headers
        assert await answer.body() == b"hello world "
    async with post_raw("predictions/probe", b"plain") as answer:
        assert (answer.status, answer.headers["content-length"]) == (200, "5")
        assert "transfer-encoding" not in answer.headers
        assert await answer.body() == b"plain"


async def test_a_client_leaving_mid_stream_leaves_the_worker_serving(
    jp_fetch: Fetch,
    jp_serverapp: Any,
    post_raw: Callable[..., Any],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await register(jp_serverapp, name="echo_stream", source=STREAM)
    fifo = gate(tmp_path)
    async with post_raw("predictions/echo_stream", b"x", **{"X-Gate": str(fifo)}) as answer:
        assert await answer.chunk() == b"hello "
    await release(fifo)  # the client is gone; the rest of the batch goes nowhere
    again = await jp_fetch("serve", "predictions", "echo_stream", method="POST", body=b"x",
                           headers={"X-Stream": "no"})  # fmt: skip
    assert again.body == b"hello world "  # the one worker finished the batch and serves on
    assert "Uncaught exception" not in caplog.text


async def test_a_failure_after_the_first_chunk_truncates_the_answer(
    jp_fetch: Fetch,
    jp_serverapp: Any,
    post_raw: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    await register(jp_serverapp, name="echo_stream", source=STREAM)
    async with post_raw("predictions/echo_stream", b"x", **{"X-Mode": "raise"}) as answer:
        assert answer.status == 200  # sent with the first chunk, before the failure
        assert [await answer.chunk() for _ in range(3)] == [b"hello "] * 3
        with pytest.raises(asyncio.IncompleteReadError):  # no terminating chunk
            await answer.chunk()
    again = await jp_fetch("serve", "predictions", "echo_stream", method="POST", body=b"x",
                           headers={"X-Stream": "no"})  # fmt: skip
    assert again.body == b"hello world "
    metrics = jp_serverapp.web_app.settings["serve_metrics"]
    assert metrics.value("Requests5XX", {"Level": "Host", "Hostname": metrics.hostname}) == 1
    assert "failed (503): Prediction failed" in caplog.text  # why the server cut it short


@pytest.mark.parametrize("by_header", [True, False], ids=["lean-path", "full-route"])
async def test_past_client_timeout_the_answer_is_dropped_as_torchserve(
    jp_fetch: Fetch, jp_serverapp: Any, by_header: bool, caplog: pytest.LogCaptureFixture
) -> None:
    await register(jp_serverapp, model_config="clientTimeoutInMills: 100\n")
    token = jp_serverapp.identity_provider.token
    auth: dict[str, Any] = (
        {"headers": {"X-Mode": "sleep", **raw()}}
        if by_header
        else {"headers": {"X-Mode": "sleep", "Authorization": "", **raw()},
              "params": {"token": token}}
    )  # fmt: skip
    with pytest.raises(HTTPClientError) as caught:  # the handler takes 0.5 s: no answer at all
        await jp_fetch("serve", "predictions", "probe", method="POST", body=b"late",
                       request_timeout=2, **auth)  # fmt: skip
    assert caught.value.code == 599  # the client's own timeout, not a status from the server
    assert "Timeout" in str(caught.value)  # the connection stayed open: nothing was sent
    assert "due to client timeout" in caplog.text
    quick = await jp_fetch("serve", "predictions", "probe", method="POST", body=b"on time",
                           headers=raw())  # fmt: skip
    assert quick.body == b"on time"


async def test_a_form_body_without_its_boundary_is_tornados_400(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    """Found by schemathesis: a multipart type without a boundary raised out of the lane's
    lazy form parsing (500). Tornado's route refuses such a body (400, "Invalid body"); the
    lane now hands it to that route."""
    await register(jp_serverapp)
    response = await jp_fetch(
        "serve", "predictions", "probe", method="POST", body=b"x", raise_error=False,
        headers={"Content-Type": "multipart/form-data", "X-Mode": "seen"},
    )  # fmt: skip
    assert response.code == 400
    error = json.loads(response.body)
    assert error["type"] == "BadRequestException"
    assert error["message"].startswith("Invalid body: ")
