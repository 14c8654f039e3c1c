"""The magics through IPython's shell: %%handler, %serve try, %mar, %serve connect."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from magic_shell import magic_shell

from jupyter_serve.archive import inspect_archive
from jupyter_serve.kernel.workspace import TryResult
from jupyter_serve.wire.errors import ArchiveError

ECHO = """
def handle(data, context):
    if data is None:
        return None
    print("handler saw", len(data), "rows")
    return [{"echo": row["body"], "id": context.get_request_id(i)} for i, row in enumerate(data)]
"""

CLASS_HANDLER = """
class Helper:
    pass


class Upper:
    def initialize(self, context):
        self.model_name = context.model_name

    def handle(self, data, context):
        context.set_response_content_type(0, "text/plain")
        return [self.model_name + ":" + row["body"].upper() for row in data]
"""


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.chdir(tmp_path)  # handler work folders go below the kernel's cwd
    with magic_shell() as ip:
        yield ip


@pytest.fixture
def server_url(
    jp_serverapp: Any, http_server_client: Any, jp_http_port: int, jp_base_url: str
) -> tuple[str, str]:
    """The in-process Jupyter server's URL and token (it answers while the test awaits)."""
    return f"http://localhost:{jp_http_port}{jp_base_url}", jp_serverapp.identity_provider.token


async def connect(shell: InteractiveShell, server_url: tuple[str, str]) -> None:
    url, token = server_url
    await asyncio.to_thread(shell.run_line_magic, "serve", f"connect {url} --token {token}")


def test_handler_cell_is_written_resolved_and_tried_in_the_kernel(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell_magic("handler", "echo", ECHO)
    assert "function handle in handler.py" in capsys.readouterr().out
    folder = tmp_path / "jupyter_serve_work" / "echo"
    assert (folder / "handler.py").read_text() == ECHO
    assert json.loads((folder / "MAR-INF" / "MANIFEST.json").read_text())["model"] == {
        "modelName": "echo", "handler": "handler.py", "modelVersion": "1.0",
    }  # fmt: skip

    outcome = shell.run_line_magic("serve", "try echo hello")
    out = capsys.readouterr().out
    assert isinstance(outcome, TryResult)
    assert outcome.status == 200
    assert "handler saw 1 rows" in out  # the handler's print shows in the cell
    assert json.loads(outcome.result.body) == {"echo": "hello", "id": "try-0"}  # type: ignore[union-attr]


def test_edited_cell_is_reloaded_and_handlers_do_not_shadow_each_other(
    shell: InteractiveShell,
) -> None:
    shell.run_cell_magic("handler", "echo", ECHO)
    shell.run_cell_magic("handler", "upper", CLASS_HANDLER)
    upper = shell.run_line_magic("serve", "try upper abc")
    assert upper.result.body == b"upper:ABC"
    assert upper.result.content_type == "text/plain"
    shell.run_cell_magic("handler", "echo", ECHO.replace('"echo": row', '"v2": row'))
    again = shell.run_line_magic("serve", "try echo x")
    assert json.loads(again.result.body) == {"v2": "x", "id": "try-0"}


def test_json_and_file_bodies(shell: InteractiveShell, tmp_path: Path) -> None:
    shell.run_cell_magic("handler", "echo", ECHO)
    as_json = shell.run_line_magic("serve", """try echo --json '{"a": [1, 2]}'""")
    assert json.loads(as_json.result.body)["echo"] == {"a": [1, 2]}
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01")
    shell.run_cell_magic(
        "handler", "raw", "def handle(data, context):\n    return None if data is None else "
        "[bytes(row['body']) for row in data]\n",
    )  # fmt: skip
    raw = shell.run_line_magic("serve", f"try raw --file {tmp_path / 'blob.bin'}")
    assert raw.result.body == b"\x00\x01"


def test_syntax_error_is_reported_with_the_cells_line_number(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell_magic("handler", "broken", "x = 1\ndef handle(data, context)\n    pass\n")
    out = capsys.readouterr().out
    # The editor numbers the `%%handler` line 1: the body's second line is the cell's third.
    assert out == (
        "SyntaxError in cell line 3: expected ':'\n"
        "def handle(data, context)\n"
        "                         ^\n"
    )
    assert not (tmp_path / "jupyter_serve_work" / "broken").exists()


def test_failing_handler_shows_the_status_and_traceback(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    source = "def handle(data, context):\n    if data is None:\n        return\n    1 / 0\n"
    shell.run_cell_magic("handler", "boom", source)
    outcome = shell.run_line_magic("serve", "try boom x")
    shown = capsys.readouterr()
    assert outcome.status == 503
    assert "HTTP 503: Prediction failed" in shown.out
    assert (shown.out + shown.err).count("ZeroDivisionError: division by zero") == 1
    assert repr(outcome) == "<TryResult 503: Prediction failed>"


def test_unresolvable_handler_is_explained_and_class_picks_one(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    source = (
        "class A:\n    def handle(self, data, context):\n        return ['A'] * len(data)\n\n"
        "class B:\n    def handle(self, data, context):\n        return ['B'] * len(data)\n"
    )
    shell.run_cell_magic("handler", "two", source)
    out = capsys.readouterr().out
    assert "does not load as a worker would load it" in out
    assert "several handler classes (A, B)" in out
    shell.run_cell_magic("handler", "two --class B", source)
    assert "class B in handler.py" in capsys.readouterr().out
    assert shell.run_line_magic("serve", "try two x").result.body == b"B"


def test_mar_failures_are_one_line_and_a_missing_export_path_is_made(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "h.py").write_text(ECHO)
    flags = "--model-name m -v 1.0 --handler h.py"
    assert shell.run_line_magic("mar", f"build {flags} --export-path ms/new") is None
    assert capsys.readouterr().out == "Created the folder ms/new.\nms/new/m.mar\n"
    (tmp_path / "afile").write_text("")
    shell.run_line_magic("mar", f"build {flags} --export-path afile")
    shell.run_line_magic("mar", f"build {flags} --export-path ms/new")
    shell.run_line_magic("mar", "build --model-name m -v 1.0 --handler nope.py")
    shell.run_line_magic("mar", "inspect nope.mar")
    shown = capsys.readouterr()
    assert shown.err == ""
    assert shown.out.splitlines() == [
        "Build failed: Given export-path afile is not a directory. "
        "Point to a valid export-path directory.",
        "Build failed: ms/new/m.mar already exists. Please specify --force/-f option to "
        "overwrite the model archive output file. See -h/--help for more details.",
        "Build failed: [Errno 2] No such file or directory: 'nope.py'",
        "Inspect failed: [Errno 2] No such file or directory: 'nope.mar'",
    ]
    with pytest.raises(ArchiveError, match="is not a directory"):
        shell.run_line_magic("mar", f"--debug build {flags} --export-path afile")


def test_try_of_an_unknown_handler_is_a_usage_error(shell: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="No %%handler 'nope'"):
        shell.run_line_magic("serve", "try nope x")


def test_mar_build_takes_the_archiver_flags(shell: InteractiveShell, tmp_path: Path) -> None:
    (tmp_path / "h.py").write_text(ECHO)
    shell.run_line_magic("mar", "build --model-name m -v 2.0 --handler h.py --archive-format tgz")
    listing = inspect_archive(tmp_path / "m.tar.gz")
    assert listing.manifest is not None
    assert listing.manifest.model.model_version == "2.0"
    with pytest.raises(UsageError, match="required"):
        shell.run_line_magic("mar", "build --model-name m")
    with pytest.raises(UsageError, match="usage"):
        shell.run_line_magic("mar", "frobnicate")


async def test_serve_connect_reaches_a_real_server(
    shell: InteractiveShell, server_url: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    await connect(shell, server_url)
    assert "Healthy" in capsys.readouterr().out


async def test_serve_dashboard_polls_the_connected_server_until_closed(
    shell: InteractiveShell, server_url: tuple[str, str]
) -> None:
    from jupyter_serve.kernel.widgets import ModelDashboard

    await connect(shell, server_url)
    dashboard = shell.run_line_magic("serve", "dashboard --interval 3600")
    assert isinstance(dashboard, ModelDashboard)
    assert dashboard.poller.running
    dashboard.close()
    assert dashboard.poller.task is not None
    await asyncio.wait([dashboard.poller.task])
    assert not dashboard.poller.running


FAILS_AT_LOAD = """
def handle(data, context):
    if data is None:
        print("reading the weights...", flush=True)
        raise RuntimeError("weights missing at load")
    return data
"""


async def test_handler_serve_predict_logs_and_unregister_against_a_real_server(
    shell: InteractiveShell,
    server_url: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    jp_root_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The kernel runs in a folder of the server's root, as Jupyter starts it: the server
    # takes the archives `--serve` builds there (jupyter_serve_work/model_store) by path.
    (jp_root_dir / "notebooks").mkdir()
    monkeypatch.chdir(jp_root_dir / "notebooks")

    def magic(kind: str, line: str, cell: str | None = None) -> Any:
        if cell is None:
            return asyncio.to_thread(shell.run_line_magic, kind, line)
        return asyncio.to_thread(shell.run_cell_magic, kind, line, cell)

    await connect(shell, server_url)
    await magic("handler", "echo --serve --workers 1 --batch-size 2", ECHO)
    out = capsys.readouterr().out
    assert 'Model "echo" Version: 1.0 registered with 1 initial workers' in out

    await magic("handler", "echo --serve --workers 1 --batch-size 2", ECHO)  # the cell re-run
    out = capsys.readouterr().out
    assert "Replacing the served echo 1.0 with this cell..." in out
    assert 'Model "echo" Version: 1.0 registered with 1 initial workers' in out

    await magic("serve", "predict echo hello")
    out = capsys.readouterr().out
    assert "HTTP 200" in out
    assert '"echo": "hello"' in out
    models = await magic("serve", "list")
    assert [m["modelName"] for m in models] == ["echo"]
    (described,) = await magic("serve", "describe echo")
    assert described["batchSize"] == 2
    await magic("serve", "logs echo")
    assert "handler saw 1 rows" in capsys.readouterr().out  # the worker's print

    await magic("handler", "fragile --serve", FAILS_AT_LOAD)
    out = capsys.readouterr().out
    assert "Register failed: HTTP 500 Failed to start workers for model fragile" in out
    # the worker's output is streamed while it loads, prefixed with its time and worker id
    assert re.search(r"^  \| \S+ \[fragile/\d+\] reading the weights\.\.\.$", out, re.M)
    assert "weights missing at load" in out  # the worker's traceback, in the notebook
    assert out.index("reading the weights") < out.index("Register failed")

    await magic("serve", "unregister echo")
    assert 'Model "echo" unregistered' in capsys.readouterr().out
