"""A fake CUDA driver for the fork tests, loaded at interpreter start as `sitecustomize`.

With `FAKE_CUDA_LOG` set (and this folder on `PYTHONPATH`), every process imports
torch at start and gets a `torch.cuda` that acts as if GPUs were present: the
first `init()` or `is_available()` in a process initialises the "driver", which
appends ``<pid> <CUDA_VISIBLE_DEVICES>`` to that file and starts a driver thread,
as the real driver does. As with real CUDA, a process forked from one that had
initialised it cannot initialise it again (RuntimeError).
"""

from __future__ import annotations

import os
import threading

_initialised_in: list[int] = []  # the pid that initialised the driver, if any


def _init() -> None:
    if _initialised_in and _initialised_in[0] == os.getpid():
        return
    if _initialised_in:
        raise RuntimeError("Cannot re-initialize CUDA in forked subprocess.")
    _initialised_in.append(os.getpid())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
    with open(os.environ["FAKE_CUDA_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{os.getpid()} {visible or 'none'}\n")
    threading.Thread(target=threading.Event().wait, name="fake-cuda", daemon=True).start()


def _is_available() -> bool:
    _init()
    return os.environ.get("CUDA_VISIBLE_DEVICES", "0") != ""


def _install() -> None:
    import torch

    torch.cuda.init = _init
    torch.cuda.is_available = _is_available
    torch.cuda.is_initialized = lambda: bool(_initialised_in) and _initialised_in[0] == os.getpid()


if os.environ.get("FAKE_CUDA_LOG"):
    _install()
