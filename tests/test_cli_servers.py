"""`jupyter serve export` and `keys` with several real servers running (issue 23, points 1
and 15): `--url` alone takes the token of that server's runtime file, however the address
is written; a refused token says how to give one; the export's README sends each model
an example body (the archive's own sample, else an inline one), and its yaml says why
it asks for the CPUs it asks for.

Two `jupyter serve` subprocesses share one runtime folder, as two servers of one user do.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from serve_process import ServeProcess

from jupyter_serve.archive import ArchiveSpec, build_mar
from jupyter_serve.cli import main
from jupyter_serve.kernel.failures import CLI_TOKEN_HINT

ECHO = "def handle(data, context):\n    return [row.get('body') for row in data or []]\n"
SAMPLE = b'{"x": [1, 2]}'


def archive(store: Path, name: str, sample: bytes | None) -> None:
    src = store.parent / f"src-{name}"
    src.mkdir(parents=True)
    (src / "echo.py").write_text(ECHO)
    extra = ()
    if sample is not None:
        (src / "sample.json").write_bytes(sample)
        extra = (str(src / "sample.json"),)
    spec = ArchiveSpec(model_name=name, version="1.0", handler=str(src / "echo.py"),
                       export_path=str(store), extra_files=extra)  # fmt: skip
    build_mar(spec)


@pytest.fixture
def servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ServeProcess]]:
    """A server with no model, and one serving `echo` (with a sample) and `plain` (none),
    both in this test's runtime folder (the only place their token is written)."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    store = tmp_path / "store"
    store.mkdir()
    archive(store, "echo", SAMPLE)
    archive(store, "plain", None)
    env = {"JUPYTER_RUNTIME_DIR": str(runtime)}
    models = ["--model-store", str(store), "--models", "echo=echo.mar", "plain=plain.mar"]
    started: list[ServeProcess] = []
    try:
        for root, args in ((tmp_path / "a", []), (tmp_path / "b", models)):
            root.mkdir()
            started.append(ServeProcess(root, args, env=env))
        for process in started:
            process.start()
        monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
        monkeypatch.delenv("JUPYTER_SERVE_URL", raising=False)
        monkeypatch.delenv("JUPYTER_SERVE_TOKEN", raising=False)
        yield started
    finally:
        for process in started:
            process.kill()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_url_alone_takes_its_runtime_files_token_and_a_403_says_how_to_give_one(
    servers: list[ServeProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = servers
    code, _, err = run(capsys, "export", str(tmp_path / "x"))
    assert code == 1
    assert "Several Jupyter servers are running" in err
    assert "pick one with --url" in err

    for url in (f"http://localhost:{first.port}", f"http://127.0.0.1:{first.port}/lab"):
        code, out, err = run(capsys, "keys", "list", "--url", url)
        assert (code, out, err) == (0, "(no inference keys)\n", "")

    code, _, err = run(capsys, "keys", "list", "--url", first.url, "--token", "wrong")
    assert code == 1
    assert err == f"jupyter serve keys: HTTP 403 Forbidden ({CLI_TOKEN_HINT})\n"

    dest = tmp_path / "exported"
    code, out, err = run(capsys, "export", str(dest), "--url", f"http://localhost:{second.port}/")
    assert code == 0, err
    assert f"Exported 2 model versions to {dest}:" in out


def test_the_readme_sends_every_model_a_body_and_the_yaml_says_why_its_cpus(
    servers: list[ServeProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    second = servers[1]
    dest = tmp_path / "exported"
    code, _, err = run(capsys, "export", str(dest), "--url", second.url)
    assert code == 0, err
    assert (dest / "samples" / "echo.json").read_bytes() == SAMPLE
    assert sorted(path.name for path in (dest / "samples").iterdir()) == ["echo.json"]
    readme = (dest / "README.md").read_text()
    assert "input.json" not in readme
    assert (
        'curl http://localhost:8085/predictions/echo -H "Content-Type: application/json" \\\n'
        "     --data-binary @samples/echo.json\n"
    ) in readme
    assert (
        'curl http://localhost:8085/predictions/plain -H "Content-Type: application/json" \\\n'
        "     -d '[1.0, 2.0, 3.0, 4.0]'   # replace with an input of plain\n"
    ) in readme
    assert "The archive of plain ships no example request" in readme
    text = (dest / "inferenceservice.yaml").read_text()
    assert "# resources: cpu is one core per TorchServe worker (2 in all" in text
    resources = yaml.safe_load(text)["spec"]["predictor"]["model"]["resources"]
    assert resources["limits"]["cpu"] == "2"
