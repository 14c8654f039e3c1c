"""Tests for the metrics route: TorchServe's Prometheus text after real requests."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from route_models import register, server_config
from tornado.httpclient import HTTPClientError, HTTPResponse

Fetch = Callable[..., Awaitable[HTTPResponse]]


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


async def test_metrics_after_a_prediction_match_torchserve_text(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    raw = {"Content-Type": "application/octet-stream"}
    await jp_fetch("serve", "predictions", "probe", method="POST", body=b"x", headers=raw)
    response = await jp_fetch("serve", "metrics")
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = response.body.decode()
    assert re.search(r'Requests2XX\{Level="Host",Hostname=".*",\} \d+\.\d+', text)  # postman
    assert re.search(
        r'ts_inference_requests_total\{model_name="probe",model_version="default",'
        r'hostname=".*",\} 1\.0',
        text,
    )
    assert "# TYPE ts_inference_requests_total counter" in text


async def test_an_unregistered_models_dashboard_figures_are_dropped(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    await register(jp_serverapp)
    raw = {"Content-Type": "application/octet-stream"}
    await jp_fetch("serve", "predictions", "probe", method="POST", body=b"x", headers=raw)

    async def dashboard_models() -> list[str]:
        response = await jp_fetch("serve", "metrics", params={"format": "json"})
        return [model["model_name"] for model in json.loads(response.body)["models"]]

    assert await dashboard_models() == ["probe"]
    await jp_fetch("serve", "models", "probe", method="DELETE")
    assert await dashboard_models() == []


async def test_a_prediction_for_an_unknown_model_counts_as_a_4xx(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    """TorchServe counts every inference answer's status class, an unknown model's 404 too."""

    async def count() -> float:
        response = await jp_fetch("serve", "metrics", params={"name[]": "Requests4XX"})
        found = re.search(r"^Requests4XX\{.*\} (\S+)$", response.body.decode(), re.M)
        return float(found.group(1)) if found else 0.0

    before = await count()
    token = jp_serverapp.identity_provider.token
    by_query = {"headers": {"Authorization": ""}, "params": {"token": token}}
    for transport in ({}, by_query):  # the lane; tornado's route (the lane leaves ?token=)
        with pytest.raises(HTTPClientError) as missing:
            await jp_fetch("serve", "predictions", "nobody", method="POST", body=b"x",
                           **transport)  # fmt: skip
        assert missing.value.code == 404
    assert await count() == before + 2


async def test_ping_and_metrics_answer_below_their_path_as_torchserve(jp_fetch: Fetch) -> None:
    for path in (("ping", ""), ("ping", "x"), ("ping", "x", "y")):
        assert json.loads((await jp_fetch("serve", *path)).body) == {"status": "Healthy"}
    for path in (("metrics", ""), ("metrics", "x")):
        assert b"# TYPE Requests2XX counter" in (await jp_fetch("serve", *path)).body


async def test_name_filter_selects_families(jp_fetch: Fetch) -> None:
    response = await jp_fetch("serve", "metrics", params={"name[]": "Requests2XX"})  # one name
    text = response.body.decode()
    assert "# TYPE Requests2XX counter" in text
    assert "ts_inference_requests_total" not in text
    names = set(re.findall(r"^# TYPE (\S+)", text, re.M))
    assert names == {"Requests2XX"}


async def test_metrics_refuse_requests_without_credentials(jp_fetch: Fetch) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("serve", "metrics", headers={"Authorization": ""})
    assert caught.value.code == 403
