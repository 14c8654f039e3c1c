"""`transformers serve` as a server under test: transformers 5.23's own OpenAI-compatible server.

It runs from its own venv `bench/.venv-hf` (`ensure_transformers_venv` creates it on first
use: torch from the local wheel first, then `transformers[serving]==5.23.0`), with
`HF_HUB_OFFLINE=1` so it only ever reads the local model folder it is given.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import servers

HF_VENV = servers.BENCH / ".venv-hf"
READY_MARK = HF_VENV / ".bench-ready"
TRANSFORMERS = "transformers[serving]==5.23.0"


def ensure_transformers_venv(log: Path) -> Path:
    """Create bench/.venv-hf with transformers 5.23 and its serving extra if it is missing;
    returns its bin folder."""
    bin_dir = HF_VENV / "bin"
    if READY_MARK.exists():
        return bin_dir
    env = {k: v for k, v in os.environ.items() if k not in servers.PIP_LEAKS}
    with log.open("a") as out:

        def run(*argv: str) -> None:
            subprocess.run(argv, check=True, stdout=out, stderr=out, env=env)

        run(sys.executable, "-m", "venv", str(HF_VENV))
        wheels = sorted(servers.TORCH_WHEELS.glob("torch-2.13.0*.whl"))
        run(str(bin_dir / "pip"), "install", "-q", str(wheels[0]) if wheels else "torch==2.13.0")
        run(str(bin_dir / "pip"), "install", "-q", TRANSFORMERS)
        run(str(bin_dir / "python"), "-c", "import torch, transformers, fastapi, uvicorn")
    READY_MARK.touch()
    return bin_dir


class TransformersServe(servers.Server):
    """`transformers serve FOLDER --continuous-batching --device cpu` from bench/.venv-hf,
    on a loopback port, everything else at its defaults.

    Its 5.23 deviations, designed around: `GET /v1/models` answers 500 (health comes from
    `/health`), `stop` is ignored with continuous batching (no request here sends one), a
    prompt past the context window is accepted (the prompts here are far shorter), and an
    unknown model name is a 400 (requests name the folder it serves). On a CPU it sizes its
    KV cache to 0.6 of the free memory when it starts, and its first request waits for
    that cache (the runner warms it up before measuring).
    """

    name = "transformers_serve"

    def __init__(self, folder: Path, model_folder: Path, bin_dir: Path) -> None:
        super().__init__(folder, model_folder)
        self.model_folder = model_folder
        self.bin_dir = bin_dir
        self.port = servers.free_port()

    def environment(self) -> dict[str, str]:
        env = {**super().environment(), "HF_HUB_OFFLINE": "1", "HF_HOME": str(self.folder / "hf")}
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env.pop("PYTHONPATH", None)
        return env

    def launch(self) -> None:
        argv = [str(self.bin_dir / "transformers"), "serve", str(self.model_folder),
                "--continuous-batching", "--device", "cpu",
                "--host", "127.0.0.1", "--port", str(self.port)]  # fmt: skip
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv, cwd=self.folder, env=self.environment(),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )  # fmt: skip

    @property
    def ping_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health"

    def chat_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"

    def _is_worker(self, child: psutil.Process) -> bool:
        return False  # one process: the model runs in the server
