"""What a worker process starts with: its command, its working directory, its environment.

Fresh workers (`process.WorkerProcess.launch`) and the worker factory
(`factory.WorkerFactory`, whose forked workers inherit its start) start alike:

* `python_command`: ``<python> -P -m <module>``. `-P` (Python 3.11+, given only
  when `python` is the server's own interpreter, whose version is known) keeps
  Python from putting the working directory first on `sys.path`.
* `start_dir`: the working directory, the folder holding jupyter_serve, which is
  first on their `PYTHONPATH` anyway; never the server's own working directory (the
  Jupyter root, where a file uploaded through the contents API, a ``torch.py``,
  would shadow the real package for an interpreter without `-P`). The worker drops
  the entry `-m` added (jupyter_serve.worker.startpath) and moves into its model's
  directory when it loads, which its loader puts first on `sys.path` (TorchServe's).
* `worker_environment`: the server's environment without its credentials
  (`WITHHELD_ENV`, plus the patterns a server adds: `ServeApp.worker_env_withheld`),
  with `PYTHONPATH` rebuilt from absolute entries only. `env_changes` is what a
  forked worker, which inherits the factory's environment, must change to match.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase

from jupyter_serve._paths import PACKAGE_ROOT

__all__ = [
    "WITHHELD_ENV",
    "env_changes",
    "python_command",
    "start_dir",
    "withheld",
    "worker_command",
    "worker_environment",
]

_PREFIXES = ("JUPYTER", "JPY_")  # Jupyter's, JupyterHub's (JUPYTERHUB_*) and ours
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PWD", "KEY", "CRYPT", "COOKIE")
# Names (glob patterns, matched case-insensitively) no worker gets: JUPYTER_TOKEN,
# JUPYTERHUB_API_TOKEN, JPY_API_TOKEN, JUPYTER_SERVE_TOKEN, JUPYTER_GATEWAY_AUTH_TOKEN,
# JUPYTER_GATEWAY_HTTP_PWD, JUPYTERHUB_SSL_KEYFILE, JUPYTERHUB_CRYPT_KEY, ... while
# JUPYTERHUB_USER, JUPYTERHUB_API_URL or JUPYTER_CONFIG_DIR are kept.
WITHHELD_ENV = tuple(f"{prefix}*{word}*" for prefix in _PREFIXES for word in _SECRET_WORDS)


def python_command(python: str, module: str) -> list[str]:
    """``python [-P] -m module``: `-P` when `python` is known to take it."""
    known = os.path.realpath(python) == os.path.realpath(sys.executable)
    safe = ["-P"] if known and sys.version_info >= (3, 11) else []
    return [python, *safe, "-m", module]


def worker_command(python: str) -> list[str]:
    """The command of a worker run by `python`, before "--fd N"."""
    return python_command(python, "jupyter_serve.worker")


def start_dir() -> str:
    """The working directory workers and the factory start in (the module docstring says why)."""
    folder = PACKAGE_ROOT
    return folder if os.path.isdir(folder) else os.path.abspath(os.sep)


def withheld(name: str, patterns: Iterable[str] = ()) -> bool:
    """Whether the variable `name` is kept from workers: it matches `WITHHELD_ENV` or
    `patterns` (glob patterns, case-insensitive)."""
    upper = name.upper()
    return any(fnmatchcase(upper, pattern.upper()) for pattern in (*WITHHELD_ENV, *patterns))


def worker_environment(
    python_path: Sequence[str] = (),
    torch_threads: int | None = None,
    extra: Mapping[str, str] | None = None,
    withhold: Sequence[str] = (),
) -> dict[str, str]:
    """The server's environment as a worker with these settings gets it.

    Variables `withheld` (with `withhold`'s patterns) are left out. `PYTHONPATH`
    gets this package's folder and `python_path` (per-model deps) before the
    server's own entries, all absolute, and none naming the server's working
    directory (a worker would read "" or "." as its own); OpenMP and MKL pools get
    `torch_threads` unless the user set them; `extra` (devices.worker_env) goes over
    everything.
    """
    env = {name: value for name, value in os.environ.items() if not withheld(name, withhold)}
    server = _outside_cwd(env.get("PYTHONPATH", "").split(os.pathsep))
    paths = [PACKAGE_ROOT, *map(os.path.abspath, python_path), *server]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYTHONUNBUFFERED"] = "1"  # handler prints reach the log line by line
    if torch_threads:  # OpenMP/MKL pools sized before torch starts (a user's own wins)
        env.setdefault("OMP_NUM_THREADS", str(torch_threads))
        env.setdefault("MKL_NUM_THREADS", str(torch_threads))
    env.update(extra or {})
    return env


def _outside_cwd(paths: Iterable[str]) -> list[str]:
    """The server's `PYTHONPATH` entries made absolute, without those naming its working
    directory (the Jupyter root): "", "." and the like."""
    here = os.getcwd()
    absolute = (os.path.abspath(path) for path in paths if path)
    return [path for path in absolute if path != here]


def env_changes(current: Mapping[str, str], wanted: Mapping[str, str]) -> dict[str, str | None]:
    """What turns `current` into `wanted`: new or changed values, None for a removed name."""
    changes: dict[str, str | None] = {
        name: value for name, value in wanted.items() if current.get(name) != value
    }
    changes.update({name: None for name in current if name not in wanted})
    return changes
