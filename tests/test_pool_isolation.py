"""What a worker's handler can reach of the server: no credential, no file of the Jupyter root.

Real fresh and forked workers (jupyter_serve.server.pool.environment, worker.startpath): the
server's Jupyter and JupyterHub credentials and the variables a server lists are
not in a handler's environment, and modules placed in the server's working
directory (the Jupyter root) shadow nothing in the factory nor in any worker,
while the model's own folder still imports.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from factory_harness import Fleet, ask, run, spec_maker

from jupyter_serve.server.models import ModelSpec
from jupyter_serve.server.pool.environment import withheld, worker_environment

CREDENTIALS = {
    "JUPYTER_TOKEN": "server-token",
    "JUPYTERHUB_API_TOKEN": "hub-token",
    "JPY_API_TOKEN": "hub-token",
    "JUPYTER_SERVE_TOKEN": "serve-token",
    "JUPYTER_GATEWAY_HTTP_PWD": "gateway-password",
    "JUPYTERHUB_OAUTH_CLIENT_SECRET": "oauth-secret",
    "JUPYTERHUB_CRYPT_KEY": "crypt-key",
}
LISTED = {"MY_PRIVATE_KEY": "listed-1", "my_private_url": "listed-2"}  # by "MY_PRIVATE_*"
KEPT = {"JUPYTERHUB_USER": "ada", "JUPYTERHUB_API_URL": "http://hub/api", "MY_SETTING": "1"}

ENVIRON = """
import os


def handle(data, context):
    if data is None:
        return None
    return [{"env": dict(os.environ), "pid": os.getpid()} for _ in data]
"""

# Reports where the modules a file in the Jupyter root could shadow come from.
PATHS = """
import importlib.util
import os
import sys

import helper


def origin(name):
    spec = importlib.util.find_spec(name)
    return None if spec is None else spec.origin


def handle(data, context):
    if data is None:
        return None
    import colorsys

    found = {name: origin(name) for name in ("torch", "json", "helper")}
    found["colorsys"] = colorsys.__file__
    return [{"found": found, "helper": helper.VALUE, "path": sys.path} for _ in data]
"""

# Shadows: each leaves a mark when it runs. The json one then hands over to the
# real json (which every worker needs), torch's fails its import, colorsys's is empty.
MARK = "import os\nopen(os.path.join(os.environ['SHADOW_MARKS'], __name__ + '-' + str(os.getpid())), 'w').close()\n"  # noqa: E501
SHADOWS = {
    "torch.py": MARK + "raise ImportError('the Jupyter root shadow of torch')\n",
    "colorsys.py": MARK,
    "json.py": MARK + (
        "import sys\n"
        "_here = os.path.dirname(os.path.abspath(__file__))\n"
        "del sys.modules[__name__]\n"
        "_saved = sys.path[:]\n"
        "sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != _here]\n"
        "try:\n    import json as _real\nfinally:\n    sys.path[:] = _saved\n"
        "sys.modules[__name__] = _real\n"
    ),
}  # fmt: skip


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., ModelSpec]:
    (tmp_path / "models").mkdir()
    return spec_maker(tmp_path / "models")


@pytest.fixture
def server_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**CREDENTIALS, **LISTED, **KEPT}.items():
        monkeypatch.setenv(name, value)


def test_the_credentials_and_the_listed_variables_are_withheld_by_name() -> None:
    names = [*CREDENTIALS, *LISTED, *KEPT]
    assert [name for name in names if withheld(name, ["my_private_*"])] == [*CREDENTIALS, *LISTED]


@pytest.mark.usefixtures("server_env")
def test_neither_the_factory_nor_a_forked_worker_sees_the_withheld_variables(
    make_spec: Callable[..., ModelSpec],
) -> None:
    pytest.importorskip("torch")
    listed = ["MY_PRIVATE_*"]

    async def main() -> dict[str, Any]:
        async with Fleet(withhold=listed) as fleet:
            pool = fleet.pool(make_spec("forked", ENVIRON), withhold=listed)
            assert (await pool.scale(1)).ok
            assert pool.processes[0].forked
            factory = psutil.Process(fleet.factory.pid or 0).environ()
            return {"worker": (await ask(pool))["env"], "factory": factory}

    seen = run(main())
    for env in (seen["worker"], seen["factory"]):
        assert not set(env) & {*CREDENTIALS, *LISTED}
        assert {name: env.get(name) for name in KEPT} == KEPT


@pytest.mark.usefixtures("server_env")
def test_a_fresh_worker_sees_none_of_the_withheld_variables(
    make_spec: Callable[..., ModelSpec],
) -> None:
    async def main() -> dict[str, Any]:
        async with Fleet(enabled=False) as fleet:
            pool = fleet.pool(make_spec("fresh", ENVIRON), withhold=["my_private_*"])
            assert (await pool.scale(1)).ok
            assert not pool.processes[0].forked
            return dict((await ask(pool))["env"])

    env = run(main())
    assert not set(env) & {*CREDENTIALS, *LISTED}
    assert {name: env.get(name) for name in KEPT} == KEPT
    assert not any(value in CREDENTIALS.values() for value in env.values())


def test_the_servers_pythonpath_never_names_its_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["", ".", str(tmp_path), "lib", "/opt/x"]))
    entries = worker_environment(["deps"])["PYTHONPATH"].split(os.pathsep)
    assert entries[1:] == [str(tmp_path / "deps"), str(tmp_path / "lib"), "/opt/x"]


def other_python(folder: Path) -> str:
    """An interpreter the server cannot tell the version of (a kernelspec's): no `-P`."""
    script = folder / "python3"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.mark.parametrize("kind", ["forked", "fresh", "fresh-other-python"])
def test_modules_in_the_jupyter_root_shadow_nothing_and_the_models_own_still_import(
    make_spec: Callable[..., ModelSpec],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    if kind == "forked":
        pytest.importorskip("torch")
    root, marks = tmp_path / "root", tmp_path / "marks"
    root.mkdir()
    marks.mkdir()
    for name, text in SHADOWS.items():
        (root / name).write_text(text)
    monkeypatch.chdir(root)  # the server's working directory: the Jupyter root
    monkeypatch.setenv("SHADOW_MARKS", str(marks))
    python = other_python(tmp_path) if kind == "fresh-other-python" else sys.executable
    spec = make_spec("paths", PATHS, python=python)
    (Path(spec.model_dir) / "helper.py").write_text("VALUE = 'from the model folder'\n")

    async def main() -> tuple[dict[str, Any], bool]:
        async with Fleet(enabled=kind == "forked") as fleet:
            pool = fleet.pool(spec)
            assert (await pool.scale(1)).ok
            return await ask(pool), pool.processes[0].forked

    seen, forked = run(main())
    assert forked is (kind == "forked")
    assert sorted(os.listdir(marks)) == []  # no shadow ran, in the factory nor the worker
    assert seen["helper"] == "from the model folder"
    assert seen["found"]["helper"] == str(Path(spec.model_dir) / "helper.py")
    others = {name: where for name, where in seen["found"].items() if name != "helper"}
    assert not [where for where in others.values() if where and where.startswith(str(root))]
    assert seen["path"][0] == spec.model_dir
    assert str(root) not in seen["path"]
