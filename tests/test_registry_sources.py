"""registry.sources and registry.download: what a register url may name, and downloads.

Local urls are resolved against a real model store on disk (symlinks included);
downloads come from a real HTTP server on loopback, in a thread, whose answers
(redirects, missing or inflated Content-Length) each test sets.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jupyter_serve.server.registry.download import check_allowed
from jupyter_serve.server.registry.sources import NUL_IN_URL, Source, SourcePolicy, locate
from jupyter_serve.wire.errors import DownloadArchive, IllegalArgument, ModelNotFound

OUTSIDE = "(local paths outside the model store are not allowed; see ServeApp.allow_local_paths)"


def find(url: str, store: Path, **policy: Any) -> Source:
    return asyncio.run(asyncio.wait_for(locate(url, store, SourcePolicy(**policy)), 30))


def refusal(url: str, store: Path, **policy: Any) -> str:
    with pytest.raises(ModelNotFound) as raised:
        find(url, store, **policy)
    assert raised.value.status_code == 404
    cause = raised.value.cause
    return raised.value.message + (f" ({cause})" if cause else "")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    (folder / "folder").mkdir(parents=True)
    (folder / "x.mar").write_bytes(b"PK")
    return folder


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.mar").write_bytes(b"PK")
    return outside / "secret.mar"


# ---- local urls ------------------------------------------------------------------------


def test_names_in_the_store_are_found(store: Path) -> None:
    assert find("x.mar", store) == Source(store / "x.mar")
    assert find("folder", store).is_folder
    assert refusal("missing.mar", store) == "Model not found at: missing.mar"
    assert refusal("file:///x.mar%00", store) == "Model not found at: file:///x.mar%00"


@pytest.mark.parametrize("url", ["x.mar\x00", "x.mar\x00/../../etc/passwd", "/etc/passwd\x00"])
def test_a_nul_character_is_torchserves_403(store: Path, url: str) -> None:
    with pytest.raises(IllegalArgument) as raised:
        find(url, store)
    body = json.loads(raised.value.body())
    assert body == {"code": 403, "type": "IllegalArgumentException", "message": NUL_IN_URL}


@pytest.mark.parametrize("url", ["http://[::1", "http://[::1/x.mar", "https://[zz]/x.mar"])
def test_a_url_that_does_not_parse_is_torchserves_download_failure(store: Path, url: str) -> None:
    with pytest.raises(DownloadArchive, match=re.escape(f"Failed to download archive from: {url}")):
        find(url, store)


@pytest.mark.parametrize(
    "url",
    [
        "../x.mar",
        "..\\x.mar",
        "%2e%2e/outside/secret.mar",
        "folder/%2E%2E/%2e%2e/outside/secret.mar",
        "file:///tmp/%2e%2e/etc/passwd",
        "http://127.0.0.1:1/models/%2e%2e/private.mar",
    ],
)
def test_dot_dot_raw_or_percent_encoded_is_refused(url: str, store: Path) -> None:
    assert refusal(url, store) == f"Relative path is not allowed in url: {url}"


def test_a_store_entry_that_is_neither_file_nor_folder_is_as_missing(store: Path) -> None:
    """A FIFO named like an archive: extracting it would have failed (500) or blocked."""
    os.mkfifo(store / "fifo.mar")
    assert refusal("fifo.mar", store) == "Model not found at: fifo.mar"
    assert refusal(str(store / "fifo.mar"), store) == f"Model not found at: {store / 'fifo.mar'}"


def test_a_store_entry_linking_outside_is_as_missing(store: Path, secret: Path) -> None:
    (store / "link.mar").symlink_to(secret)
    (store / "linked").symlink_to(secret.parent, target_is_directory=True)
    assert refusal("link.mar", store) == "Model not found at: link.mar"
    assert refusal("linked/secret.mar", store) == ("Model not found at: linked/secret.mar")


def test_paths_outside_the_store_get_one_answer_whether_they_exist_or_not(
    store: Path, secret: Path
) -> None:
    urls = [str(secret), str(secret.with_name("nope.mar")), secret.as_uri(), "file:///nope.mar"]
    for url in urls:
        assert refusal(url, store) == f"Model not found at: {url} {OUTSIDE}"


def test_absolute_paths_inside_the_store_are_found(store: Path) -> None:
    # what a restore registers for a downloaded archive
    assert find(str(store / "x.mar"), store) == Source(store / "x.mar")
    assert find((store / "x.mar").as_uri(), store) == Source(store / "x.mar")
    url = str(store / "gone.mar")
    assert refusal(url, store) == f"Model not found at: {url}"


def test_allow_local_paths_restores_torchserves_any_local_path(store: Path, secret: Path) -> None:
    assert find(str(secret), store, allow_local_paths=True) == Source(secret)
    assert find(secret.as_uri(), store, allow_local_paths=True) == Source(secret)
    missing = str(secret.with_name("nope.mar"))
    assert refusal(missing, store, allow_local_paths=True) == (f"Model not found at: {missing}")


def test_work_folders_below_the_server_root_are_found(store: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    exports = root / "notebooks" / "jupyter_serve_work" / "model_store"
    exports.mkdir(parents=True)
    (exports / "echo.mar").write_bytes(b"PK")
    (root / "other").mkdir()
    (root / "other" / "echo.mar").write_bytes(b"PK")
    (root / "jupyter_serve_work").symlink_to(root / "other")  # the name alone is not enough
    assert find(str(exports / "echo.mar"), store, workspace_root=root).path == exports / "echo.mar"
    for elsewhere in (root / "other" / "echo.mar", root / "jupyter_serve_work" / "echo.mar"):
        assert refusal(str(elsewhere), store, workspace_root=root).endswith(OUTSIDE)
    assert refusal(str(exports / "echo.mar"), store, workspace_root=tmp_path / "x").endswith(
        OUTSIDE
    )


# ---- downloads -------------------------------------------------------------------------


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    length: bool = True  # send Content-Length (else the body ends when the connection closes)


class _Remote(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.seen.append(self.path)
        answer = self.server.answers.get(self.path, Answer(404))
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        if answer.length and "Content-Length" not in answer.headers:
            self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    answers: dict[str, Answer]
    seen: list[str]


@pytest.fixture
def remote() -> Iterator[tuple[_Server, str]]:
    server = _Server(("127.0.0.1", 0), _Remote)
    server.answers, server.seen = {}, []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


ALLOWED = (r"http://127\.0\.0\.1:\d+/models/.*",)


def test_an_allowed_download_lands_in_the_store(remote: tuple[_Server, str], store: Path) -> None:
    server, base = remote
    server.answers["/models/ok.mar"] = Answer(body=b"archive")
    source = find(f"{base}/models/ok.mar", store, allowed_urls=ALLOWED)
    assert source == Source(store / "ok.mar", downloaded=store / "ok.mar")
    assert (store / "ok.mar").read_bytes() == b"archive"


def test_every_redirect_hop_is_checked(remote: tuple[_Server, str], store: Path) -> None:
    server, base = remote
    server.answers["/models/moved.mar"] = Answer(302, headers={"Location": "/models/ok.mar"})
    server.answers["/models/ok.mar"] = Answer(body=b"archive")
    server.answers["/models/out.mar"] = Answer(302, headers={"Location": f"{base}/private.mar"})
    server.answers["/models/ftp.mar"] = Answer(302, headers={"Location": "ftp://h/models/x.mar"})
    server.answers["/models/file.mar"] = Answer(302, headers={"Location": "file:///etc/passwd"})
    server.answers["/private.mar"] = Answer(body=b"private")
    assert find(f"{base}/models/moved.mar", store, allowed_urls=ALLOWED).path == (
        store / "moved.mar"
    )
    assert (store / "moved.mar").read_bytes() == b"archive"
    assert refusal(f"{base}/models/out.mar", store, allowed_urls=ALLOWED) == (
        f"Given URL {base}/private.mar does not match any allowed URL(s)"
    )
    assert refusal(f"{base}/models/ftp.mar", store, allowed_urls=ALLOWED) == (
        "Given URL ftp://h/models/x.mar does not match any allowed URL(s)"
    )
    with pytest.raises(DownloadArchive):  # urllib itself follows no file:// redirect
        find(f"{base}/models/file.mar", store, allowed_urls=ALLOWED)
    assert "/private.mar" not in server.seen
    assert sorted(p.name for p in store.iterdir()) == ["folder", "moved.mar", "x.mar"]


def test_the_size_cap_counts_streamed_bytes(remote: tuple[_Server, str], store: Path) -> None:
    server, base = remote
    body = b"\x00" * (3 << 20)
    server.answers["/models/unsized.mar"] = Answer(body=body, length=False)
    server.answers["/models/announced.mar"] = Answer(body=body)
    for name in ("unsized.mar", "announced.mar"):
        url = f"{base}/models/{name}"
        with pytest.raises(DownloadArchive) as raised:
            find(url, store, allowed_urls=ALLOWED, max_download_size=1 << 20)
        assert raised.value.message == (
            f"Failed to download archive from: {url}: larger than max_download_size (1048576 bytes)"
        )
        assert raised.value.status_code == 400
    assert sorted(p.name for p in store.iterdir()) == ["folder", "x.mar"]  # no partial file
    source = find(f"{base}/models/unsized.mar", store, allowed_urls=ALLOWED, max_download_size=0)
    assert source.path.stat().st_size == 3 << 20


def test_failed_downloads_keep_torchserves_message(
    remote: tuple[_Server, str], store: Path
) -> None:
    _, base = remote
    url = f"{base}/models/missing.mar"
    with pytest.raises(DownloadArchive) as raised:
        find(url, store, allowed_urls=ALLOWED)
    assert raised.value.message == f"Failed to download archive from: {url}"
    assert sorted(p.name for p in store.iterdir()) == ["folder", "x.mar"]


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://h/models/%61bc.mar", True),  # matched after decoding
        ("http://h/models/a%2F..%2Fb.mar", False),  # a decoded `..` segment
        ("http://h/models/..%5Cb.mar", False),
        ("http://h/other/abc.mar", False),
        ("ftp://h/models/abc.mar", False),
    ],
)
def test_the_allow_list_matches_the_decoded_url(url: str, allowed: bool) -> None:
    patterns = (r"http://h/models/[a-z]+\.mar",)
    if allowed:
        check_allowed(url, patterns)
    else:
        with pytest.raises(ModelNotFound, match=r"does not match any allowed URL\(s\)$"):
            check_allowed(url, patterns)
