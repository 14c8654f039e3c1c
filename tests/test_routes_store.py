"""`PUT serve/model-store/{file}`: archives uploaded into the model store, then registered."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from route_models import PROBE, serve_state, server_config
from tornado.httpclient import HTTPResponse

from jupyter_serve.archive import ArchiveSpec, build_mar
from jupyter_serve.server.http.store import check_store_name
from jupyter_serve.wire.errors import BadRequest

Fetch = Callable[..., Awaitable[HTTPResponse]]
LIMIT = 64 * 1024


@pytest.fixture
def jp_server_config(tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """`max_download_size` LIMIT, and the ServeApp settings a test passes indirectly."""
    return server_config(tmp_path, max_download_size=LIMIT, **getattr(request, "param", {}))


async def put(jp_fetch: Fetch, name: str, body: bytes, **params: str) -> HTTPResponse:
    return await jp_fetch("serve", "model-store", name, method="PUT", body=body, params=params,
                          raise_error=False)  # fmt: skip


def probe_mar(tmp_path: Path) -> bytes:
    (tmp_path / "probe.py").write_text(PROBE)
    spec = ArchiveSpec(model_name="probe", handler=str(tmp_path / "probe.py"), version="1.0",
                       export_path=str(tmp_path))  # fmt: skip
    return build_mar(spec).read_bytes()


def leftovers(store: Path) -> list[str]:
    return sorted(path.name for path in store.iterdir() if path.name.startswith("."))


async def test_an_uploaded_archive_is_registered_by_its_store_name(
    jp_fetch: Fetch, jp_serverapp: Any, tmp_path: Path
) -> None:
    data = probe_mar(tmp_path)
    answer = await put(jp_fetch, "uploaded.mar", data)
    assert answer.code == 201
    assert json.loads(answer.body) == {
        "status": "Archive uploaded.mar saved in the model store.", "url": "uploaded.mar",
    }  # fmt: skip
    registry, store = serve_state(jp_serverapp)
    assert (store / "uploaded.mar").read_bytes() == data
    assert leftovers(store) == []
    registered = await jp_fetch("serve", "models", method="POST", body=b"",
                                params={"url": "uploaded.mar", "initial_workers": "0"})  # fmt: skip
    assert "registered" in json.loads(registered.body)["status"]
    assert registry.get("probe").spec.model_url == "uploaded.mar"


async def test_a_taken_name_is_409_unless_same_bytes_or_overwrite(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    _, store = serve_state(jp_serverapp)
    assert (await put(jp_fetch, "a.tar.gz", b"first")).code == 201
    same = await put(jp_fetch, "a.tar.gz", b"first")
    assert (same.code, json.loads(same.body)["status"]) == (
        200, "Archive a.tar.gz is already in the model store, unchanged.",
    )  # fmt: skip
    taken = await put(jp_fetch, "a.tar.gz", b"second")
    error = json.loads(taken.body)
    assert (taken.code, error["type"]) == (409, "ConflictStatusException")
    assert "overwrite=true" in error["message"]
    assert (store / "a.tar.gz").read_bytes() == b"first"
    replaced = await put(jp_fetch, "a.tar.gz", b"second", overwrite="true")
    assert replaced.code == 200
    assert (store / "a.tar.gz").read_bytes() == b"second"
    assert leftovers(store) == []


@pytest.mark.parametrize(
    "name",
    ["x.pt", ".mar", ".hidden.mar", "a..mar", "..", "back\\slash.zip", "x" * 197 + ".mar"],
)
async def test_names_that_are_not_plain_archive_file_names_are_400(
    jp_fetch: Fetch, jp_serverapp: Any, name: str
) -> None:
    answer = await put(jp_fetch, name, b"data")
    assert answer.code == 400
    assert "Invalid archive name" in json.loads(answer.body)["message"]
    _, store = serve_state(jp_serverapp)
    assert list(store.iterdir()) == []


def test_name_rules() -> None:
    for name in ("m.mar", "m.tar.gz", "m.tgz", "m.zip", "a-b_c 1.mar", "x" * 196 + ".mar",
                 NFC_NAME, "模型.mar"):  # fmt: skip
        assert check_store_name(name) == name
    assert check_store_name(NFD_NAME) == NFC_NAME
    for name in ("sub/x.mar", "../x.mar", "nul\x00.mar", "line\n.mar", "m.tar", "é" * 99 + ".mar",
                 *UNSHOWN):  # fmt: skip
        with pytest.raises(BadRequest, match="Invalid archive name"):
            check_store_name(name)


# Names that do not show as what they are (server/registry/names.py), each refused with 400.
UNSHOWN = {
    "x\u202egpj.mar": "U+202E (RIGHT-TO-LEFT OVERRIDE)",
    "del\x7f.mar": "U+007F",
    "esc\x1b[31m.mar": "U+001B",
    "c1\x85.mar": "U+0085",
    "zero\u200bwidth.mar": "U+200B (ZERO WIDTH SPACE)",
    "joined\u200d.mar": "U+200D (ZERO WIDTH JOINER)",
    "lines\u2028.mar": "U+2028 (LINE SEPARATOR)",
    "bom\ufeff.mar": "U+FEFF",
    "-rf.mar": "starts with '-'",
    "--help.zip": "starts with '-'",
}
NFC_NAME = "mod\u00e8le-\u00e9.mar"  # "modèle-é.mar", composed
NFD_NAME = "mode\u0300le-e\u0301.mar"  # the same on screen, decomposed


@pytest.mark.parametrize("name", list(UNSHOWN))
async def test_names_that_do_not_show_as_what_they_are_are_400(
    jp_fetch: Fetch, jp_serverapp: Any, name: str
) -> None:
    answer = await put(jp_fetch, name, b"data")
    error = json.loads(answer.body)
    assert (answer.code, error["type"]) == (400, "BadRequestException")
    assert error["message"].startswith(f"Invalid archive name {name!r}: ")
    assert UNSHOWN[name] in error["message"]
    _, store = serve_state(jp_serverapp)
    assert list(store.iterdir()) == []


async def test_non_ascii_names_are_saved_composed_nfc(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    _, store = serve_state(jp_serverapp)
    created = await put(jp_fetch, "模型-é.mar", b"one")
    assert (created.code, json.loads(created.body)["url"]) == (201, "模型-é.mar")
    decomposed = await put(jp_fetch, NFD_NAME, b"two")
    assert (decomposed.code, json.loads(decomposed.body)) == (201, {
        "status": f"Archive {NFC_NAME} saved in the model store.", "url": NFC_NAME,
    })  # fmt: skip
    assert sorted(path.name for path in store.iterdir()) == sorted([NFC_NAME, "模型-é.mar"])
    again = await put(jp_fetch, NFD_NAME, b"two")  # the same name once composed
    assert (again.code, json.loads(again.body)["url"]) == (200, NFC_NAME)
    taken = await put(jp_fetch, NFD_NAME, b"three")
    assert (taken.code, json.loads(taken.body)["type"]) == (409, "ConflictStatusException")
    assert (store / NFC_NAME).read_bytes() == b"two"


@pytest.mark.parametrize("overwrite", ["false", "true"])
async def test_a_twin_of_a_stored_name_is_409_even_with_overwrite(
    jp_fetch: Fetch, jp_serverapp: Any, overwrite: str
) -> None:
    """A decomposed name put in the store by hand: its composed twin is refused, since
    two files would look the same; `overwrite` would not replace the other spelling."""
    _, store = serve_state(jp_serverapp)
    store.mkdir(parents=True, exist_ok=True)
    (store / NFD_NAME).write_bytes(b"by hand")
    answer = await put(jp_fetch, NFC_NAME, b"data", overwrite=overwrite)
    error = json.loads(answer.body)
    assert (answer.code, error["type"]) == (409, "ConflictStatusException")
    assert repr(NFD_NAME) in error["message"]
    assert "Unicode normalisation" in error["message"]
    assert sorted(path.name for path in store.iterdir()) == [NFD_NAME]


@pytest.mark.parametrize("overwrite", ["false", "true"])
async def test_a_name_that_is_a_folder_model_is_409(
    jp_fetch: Fetch, jp_serverapp: Any, overwrite: str
) -> None:
    _, store = serve_state(jp_serverapp)
    (store / "folded.mar").mkdir(parents=True)
    (store / "folded.mar" / "handler.py").write_text("x = 1\n")
    answer = await put(jp_fetch, "folded.mar", b"data", overwrite=overwrite)
    error = json.loads(answer.body)
    assert (answer.code, error["type"]) == (409, "ConflictStatusException")
    assert "is a model folder in the model store" in error["message"]
    assert (store / "folded.mar" / "handler.py").read_text() == "x = 1\n"
    assert leftovers(store) == []


async def test_a_non_ascii_store_name_registers(
    jp_fetch: Fetch, jp_serverapp: Any, tmp_path: Path
) -> None:
    stored = json.loads((await put(jp_fetch, NFD_NAME, probe_mar(tmp_path))).body)["url"]
    registered = await jp_fetch("serve", "models", method="POST", body=b"",
                                params={"url": stored, "initial_workers": "0"})  # fmt: skip
    assert "registered" in json.loads(registered.body)["status"]
    registry, _ = serve_state(jp_serverapp)
    assert registry.get("probe").spec.model_url == NFC_NAME


@pytest.mark.parametrize("url", ["x\u202egpj.mar", "-rf.mar", "del\x7f.mar"])
async def test_the_register_url_follows_the_same_rule(
    jp_fetch: Fetch, jp_serverapp: Any, tmp_path: Path, url: str
) -> None:
    """Such a name can only be in the store by hand; registering it is refused the same way
    (its url would be shown back as the model's modelUrl)."""
    _, store = serve_state(jp_serverapp)
    store.mkdir(parents=True, exist_ok=True)
    (store / url).write_bytes(probe_mar(tmp_path))
    answer = await jp_fetch("serve", "models", method="POST", body=b"",
                            params={"url": url, "initial_workers": "0"},
                            raise_error=False)  # fmt: skip
    error = json.loads(answer.body)
    assert (answer.code, error["type"]) == (400, "BadRequestException")
    assert error["message"].startswith(f"Invalid model url {url!r}: ")


async def test_an_encoded_slash_in_the_name_is_400(
    http_server_client: Any, jp_serverapp: Any, jp_base_url: str
) -> None:
    token = jp_serverapp.identity_provider.token
    answer = await http_server_client.fetch(
        f"{jp_base_url}serve/model-store/..%2Fescape.mar", method="PUT", body=b"data",
        headers={"Authorization": f"token {token}"}, raise_error=False,
    )  # fmt: skip
    assert answer.code == 400
    _, store = serve_state(jp_serverapp)
    assert list(store.iterdir()) == []
    assert not (store.parent / "escape.mar").exists()


async def test_a_body_over_max_download_size_is_413_and_leaves_nothing(
    jp_fetch: Fetch, jp_serverapp: Any
) -> None:
    answer = await put(jp_fetch, "big.mar", b"x" * (LIMIT + 1))
    assert answer.code == 413
    assert json.loads(answer.body)["type"] == "RequestEntityTooLargeException"
    _, store = serve_state(jp_serverapp)
    assert list(store.iterdir()) == []


@pytest.mark.parametrize("jp_server_config", [{"max_request_size": 1024}], indirect=True)
async def test_bodies_past_max_request_size_are_taken(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    _, store = serve_state(jp_serverapp)
    assert (await put(jp_fetch, "m.zip", b"z" * 4096)).code == 201  # other routes: 413
    assert (store / "m.zip").stat().st_size == 4096
    too_big = await jp_fetch("serve", "models", method="POST", body=b"z" * 4096,
                             raise_error=False)  # fmt: skip
    assert too_big.code == 413


@pytest.mark.parametrize("jp_server_config", [{"enable_model_api": False}], indirect=True)
async def test_with_the_model_api_off_it_is_405(jp_fetch: Fetch, jp_serverapp: Any) -> None:
    assert (await put(jp_fetch, "m.mar", b"data")).code == 405
    _, store = serve_state(jp_serverapp)
    assert list(store.iterdir()) == []


async def test_the_body_streams_past_the_connections_buffered_body_limit(
    jp_fetch: Fetch, jp_serverapp: Any, http_server: Any
) -> None:
    """The HTTP server's `max_body_size` (jupyter_server's trait, 512 MB) caps the bodies
    it buffers; the upload streams to disk and raises it to `max_download_size`."""
    http_server.conn_params.max_body_size = 1024
    _, store = serve_state(jp_serverapp)
    assert (await put(jp_fetch, "m.tgz", b"t" * 8192)).code == 201
    assert (store / "m.tgz").read_bytes() == b"t" * 8192
