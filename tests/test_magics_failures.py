"""`%serve` failures print one line, no traceback; `%serve register PATH` takes the kernel's files.

Against a real in-process server: a 404 model, 400 parameters, 403, a server that is
gone, the kernel's own mistakes (a missing file, malformed JSON, a folder), and
`--debug`, which raises instead. The register tests run the kernel in a folder the
server cannot read archives from (not below its root), as with a remote server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from magic_shell import magic_shell, point_at
from route_models import PROBE, register, serve_state, server_config

from jupyter_serve.kernel.client import ServeClient, ServeClientError, ServerInfo
from jupyter_serve.kernel.failures import TOKEN_HINT


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return server_config(tmp_path)


@pytest.fixture
def server(live_server: ServerInfo) -> ServerInfo:
    return live_server


@pytest.fixture
def shell(
    server: ServerInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[InteractiveShell]:
    """The magics in a kernel whose working folder is outside the server's root."""
    (tmp_path / "kernel").mkdir()
    monkeypatch.chdir(tmp_path / "kernel")
    with magic_shell(server) as ip:
        yield ip


async def one_line(shell: InteractiveShell, line: str, capsys: pytest.CaptureFixture[str]) -> str:
    """What `%serve <line>` printed: exactly one line on stdout, nothing on stderr."""
    assert await asyncio.to_thread(shell.run_line_magic, "serve", line) is None
    shown = capsys.readouterr()
    assert shown.err == ""
    assert shown.out.count("\n") == 1, shown.out
    return shown.out.rstrip("\n")


NOT_FOUND = [
    ("predict nope hi", "Predict failed: HTTP 404 "),
    ("explain nope hi", "Explain failed: HTTP 404 "),
    ("describe nope", "Describe failed: HTTP 404 "),
    ("scale nope --min 1", "Scale failed: HTTP 404 "),
    ("unregister nope", "Unregister failed: HTTP 404 "),
    ("logs nope", "Logs failed: HTTP 404 "),
    ("keys revoke nope", "Keys revoke failed: HTTP 404 Key not found: nope"),
    ("register nope.mar", "Register failed: HTTP 404 Model not found at: nope.mar"),
]


@pytest.mark.parametrize(("line", "expected"), NOT_FOUND)
async def test_an_unknown_model_is_one_line(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], line: str, expected: str
) -> None:
    assert (await one_line(shell, line, capsys)).startswith(expected)


async def test_bad_parameters_and_the_kernels_own_mistakes_are_one_line(
    shell: InteractiveShell, jp_serverapp: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    await register(jp_serverapp, workers=0)
    scaled = await one_line(shell, "scale probe --min 3 --max 1", capsys)
    assert scaled.startswith("Scale failed: HTTP 400 ")
    malformed = await one_line(shell, "predict probe --json '{oops'", capsys)
    assert malformed.startswith("Predict failed: --json is not JSON: ")
    missing = await one_line(shell, "predict probe --file no-such.bin", capsys)
    assert missing.startswith("Predict failed: [Errno 2] No such file or directory")
    Path("folder_model").mkdir()
    folder = await one_line(shell, "register folder_model", capsys)
    assert folder.startswith("Register failed: folder_model is a folder: build an archive")


async def test_refused_and_unreachable_servers_are_one_line(
    shell: InteractiveShell, server: ServerInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    point_at(shell, ServerInfo(server.url, "wrong-token"))
    for line in ("list", "predict probe hi", "unregister probe", "keys list"):
        refused = await one_line(shell, line, capsys)
        assert " failed: HTTP 403 " in refused, refused
        assert refused.endswith(f" ({TOKEN_HINT})"), refused
    gone = ServerInfo("http://127.0.0.1:9/")  # the discard port: nobody listens
    point_at(shell, gone)
    for line in ("list", "describe probe", "register nope.mar", "keys create"):
        unreachable = await one_line(shell, line, capsys)
        assert " failed: no answer from http://127.0.0.1:9/: " in unreachable, unreachable
    point_at(shell, server)
    connect = await one_line(shell, "connect http://127.0.0.1:9/ --token t", capsys)
    assert connect.startswith("Connect failed: no answer from http://127.0.0.1:9/: ")


async def test_debug_raises_with_the_traceback(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ServeClientError) as caught:
        await asyncio.to_thread(shell.run_line_magic, "serve", "--debug predict nope hi")
    assert caught.value.status == 404
    assert capsys.readouterr().out == ""


async def test_a_failed_load_shows_the_cause(
    shell: InteractiveShell, jp_serverapp: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fails = "def handle(data, context):\n    raise RuntimeError('weights missing')\n"
    await register(jp_serverapp, "fragile", source=fails, workers=0)
    await asyncio.to_thread(shell.run_line_magic, "serve", "scale fragile --min 1")
    out = capsys.readouterr().out
    assert "Scale failed: HTTP " in out
    assert "(cause: RuntimeError: weights missing)" in out


def build(shell: InteractiveShell, body: str) -> None:
    Path("probe.py").write_text(PROBE + body)
    Path("ms").mkdir(exist_ok=True)
    flags = "--model-name probe -v 1.0 --handler probe.py --export-path ms --force"
    shell.run_line_magic("mar", f"build {flags}")


async def test_register_of_a_kernel_path_uploads_it_into_the_model_store(
    shell: InteractiveShell, jp_serverapp: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def serve(line: str) -> Any:
        return asyncio.to_thread(shell.run_line_magic, "serve", line)

    registry, store = serve_state(jp_serverapp)
    build(shell, "")
    assert capsys.readouterr().out.strip().endswith("ms/probe.mar")
    await serve("register ms/probe.mar --workers 0")
    out = capsys.readouterr().out
    assert "Uploaded ms/probe.mar into the server's model store as probe.mar." in out
    assert 'Model "probe" Version: 1.0 registered with 0 initial workers' in out
    assert (store / "probe.mar").read_bytes() == Path("ms/probe.mar").read_bytes()
    assert registry.get("probe").spec.model_url == "probe.mar"

    await serve("unregister probe")
    await serve(f"register {Path('ms/probe.mar').resolve()} --workers 0")  # the same bytes
    assert "registered with 0 initial workers" in capsys.readouterr().out

    await serve("unregister probe")
    build(shell, "# edited\n")
    capsys.readouterr()
    taken = await one_line(shell, "register ms/probe.mar --workers 0", capsys)
    assert taken.startswith("Register failed: HTTP 409 uploading probe.mar: Archive probe.mar")
    assert "registered" not in taken
    await serve("register ms/probe.mar --workers 0 --overwrite")
    assert "registered with 0 initial workers" in capsys.readouterr().out
    assert (store / "probe.mar").read_bytes() == Path("ms/probe.mar").read_bytes()


async def test_a_mistyped_model_name_gets_the_close_names_of_the_served_models(
    shell: InteractiveShell, jp_serverapp: Any, server: ServerInfo,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    await register(jp_serverapp, "mnistnb", workers=0)
    await register(jp_serverapp, "squares", workers=0)
    predicted = await one_line(shell, "predict mnsitnb hi", capsys)
    assert predicted == "Predict failed: HTTP 404 Model not found: mnsitnb (did you mean mnistnb?)"
    for line in ("explain mnsitnb hi", "describe mnistn", "scale mnistnbb --min 1",
                 "unregister mnistnb_", "logs mnsitnb"):  # fmt: skip
        said = await one_line(shell, line, capsys)
        assert said.endswith("(did you mean mnistnb?)"), said
    close = await one_line(shell, "describe sqaures", capsys)
    assert close.endswith("(did you mean squares?)"), close
    far = await one_line(shell, "predict resnet hi", capsys)
    assert far == "Predict failed: HTTP 404 Model not found: resnet"
    version = await one_line(shell, "describe mnistnb --version 9.0", capsys)
    assert "did you mean" not in version
    with pytest.raises(ServeClientError) as caught:  # the Python client says it too
        await asyncio.to_thread(ServeClient(server).predict, "mnsitnb", "hi")
    assert str(caught.value).endswith("Model not found: mnsitnb (did you mean mnistnb?)")


async def test_registering_a_version_twice_says_what_to_do(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    build(shell, "")
    await asyncio.to_thread(shell.run_line_magic, "serve", "register ms/probe.mar --workers 0")
    assert "registered with 0 initial workers" in capsys.readouterr().out
    again = await one_line(shell, "register ms/probe.mar --workers 0", capsys)
    assert again == (
        "Register failed: HTTP 409 Model version 1.0 is already registered for model probe "
        "(register another version: build the archive with --version 2.0 (%mar build), "
        "or unregister this one first: %serve unregister probe --version 1.0)"
    )
    with pytest.raises(ServeClientError) as caught:
        await asyncio.to_thread(
            shell.run_line_magic, "serve", "--debug register ms/probe.mar --workers 0"
        )
    assert caught.value.status == 409
