"""The demo notebooks, executed headless against a real `jupyter serve` (issue 5, point 7).

One `jupyter serve` subprocess (`serve_process.ServeProcess`) serves all five
notebooks. Each notebook runs in a fresh `python3` kernel of this environment
(nbclient), in a temporary working directory. The quickstart's kernel finds the
server as a kernel started by Jupyter does (the runtime file of its parent
process); the others are told by `JUPYTER_SERVE_URL` and `JUPYTER_SERVE_TOKEN`,
as in CI. A cell that raises fails the run (nbclient's `CellExecutionError`);
cells tagged `check-*` are then asserted on by what they printed or displayed.
The committed `.ipynb` files must be exactly what `notebooks/_build.py` writes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import pytest
import yaml
from jupyter_client.kernelspec import KernelSpecManager
from kserve_schema import validate_inference_service
from nbclient import NotebookClient
from serve_process import TOKEN, ServeProcess

from jupyter_serve.kernel.client import TOKEN_ENV, URL_ENV

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
KERNEL = "python3"
CELL_TIMEOUT = 300  # seconds; only a guard against a cell that never ends
WIDGET = "application/vnd.jupyter.widget-view+json"


def load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("notebooks_build", NOTEBOOKS / "_build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Executed:
    """An executed notebook, read by cell tag."""

    def __init__(self, nb: nbformat.NotebookNode) -> None:
        self.nb = nb
        self.cells = {tag: cell for cell in nb.cells for tag in cell.metadata.get("tags", [])}

    def outputs(self, tag: str) -> list[Any]:
        return list(self.cells[tag].outputs)

    def text(self, tag: str) -> str:
        """Everything the cell printed (stdout) or returned/displayed as text."""
        parts = []
        for output in self.outputs(tag):
            if output.output_type == "stream" and output.name == "stdout":
                parts.append(output.text)
            elif output.output_type in ("execute_result", "display_data"):
                parts.append(output.data.get("text/plain", ""))
                parts.append(output.data.get("text/html", ""))
        return "".join(parts)

    def stderr_of(self, tag: str) -> str:
        """What the cell tagged `tag` wrote to stderr."""
        streams = [o for o in self.outputs(tag) if o.output_type == "stream"]
        return "".join(o.text for o in streams if o.name == "stderr")

    def stderr(self, *, skip: tuple[str, ...] = ()) -> str:
        """What the code cells wrote to stderr, but for the cells tagged `skip`."""
        code = [c for c in self.nb.cells if c.cell_type == "code"]
        cells = [c for c in code if not set(c.metadata.get("tags", [])) & set(skip)]
        return "".join(
            output.text
            for cell in cells
            for output in cell.outputs
            if output.output_type == "stream" and output.name == "stderr"
        )

    def widgets(self, tag: str) -> list[str]:
        """The text form of each widget the cell displayed."""
        return [o.data["text/plain"] for o in self.outputs(tag) if WIDGET in o.get("data", {})]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("notebooks-server")


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[ServeProcess]:
    process = ServeProcess(root)
    try:
        yield process.start()
    finally:
        process.kill()  # the server and any worker a failed notebook left behind


@pytest.fixture(scope="module")
def base_env() -> dict[str, str]:
    """This environment, without any parent Jupyter's variables; checks the kernelspec."""
    spec = KernelSpecManager().get_kernel_spec(KERNEL)
    runs_here = spec.argv[0] in ("python", "python3", sys.executable)
    assert runs_here, f"kernel {KERNEL!r} runs {spec.argv[0]}; run `ipykernel install --sys-prefix`"
    return {k: v for k, v in os.environ.items() if not k.startswith("JPY_")}


@pytest.fixture(scope="module")
def kernel_env(base_env: dict[str, str], server: ServeProcess) -> dict[str, str]:
    """A kernel told where the server is, as in CI or a kernel outside Jupyter."""
    return {**base_env, URL_ENV: server.url, TOKEN_ENV: TOKEN}


@pytest.fixture(scope="module")
def child_kernel_env(
    base_env: dict[str, str],
    server: ServeProcess,
    root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, str]:
    """A kernel as a Jupyter server starts it: only the runtime file of its parent names it.

    The kernel's parent is this process (jupyter_client sets `JPY_PARENT_PID` to the
    launcher's pid), so the server's own runtime file is published under our pid.
    """
    served = root / ".jupyter-runtime" / f"jpserver-{server.process.pid}.json"
    runtime = tmp_path_factory.mktemp("kernel-runtime")
    (runtime / f"jpserver-{os.getpid()}.json").write_text(served.read_text())
    env = {k: v for k, v in base_env.items() if k not in (URL_ENV, TOKEN_ENV)}
    return {**env, "JUPYTER_RUNTIME_DIR": str(runtime)}


def execute(name: str, env: dict[str, str], workdir: Path) -> Executed:
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    client = NotebookClient(
        nb, timeout=CELL_TIMEOUT, kernel_name=KERNEL, resources={"metadata": {"path": str(workdir)}}
    )
    client.execute(env=env)
    return Executed(nb)


def registered(server: ServeProcess) -> list[str]:
    with server.client() as http:
        return [model["modelName"] for model in http.get("models").json()["models"]]


def unregister(server: ServeProcess, name: str) -> None:
    """What a tour's "When you are done" section tells the user to run (if it is there)."""
    with server.client() as http:
        http.delete(f"models/{name}")


def assert_no_cleanup_cell(run: Executed) -> None:
    """The clean-up is Markdown to copy: no code cell that "Run All" runs unregisters."""
    code = [cell.source for cell in run.nb.cells if cell.cell_type == "code"]
    assert not [source for source in code if "%serve unregister" in source]
    assert "## When you are done" in run.nb.cells[-1].source


def json_after_status(text: str) -> Any:
    """The JSON body `%serve predict` printed after its `HTTP <status>` line."""
    return json.loads(text.split("\n", 1)[1])


# ---- the generator ------------------------------------------------------------------


def test_committed_notebooks_are_the_generated_ones_without_outputs(tmp_path: Path) -> None:
    written = load_builder().main(tmp_path)
    assert [path.name for path in written] == sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    for path in written:
        committed = NOTEBOOKS / path.name
        assert committed.read_text() == path.read_text(), f"run notebooks/_build.py: {path.name}"
        nb = nbformat.read(committed, as_version=4)
        code = [cell for cell in nb.cells if cell.cell_type == "code"]
        assert all(c.outputs == [] and c.execution_count is None for c in code)
        assert nb.metadata.kernelspec.name == KERNEL


def test_build_reads_code_blocks_tags_and_cell_splits() -> None:
    source = (
        "# Title\n\nprose\n\n```python tags=check-a,b\n%%handler x\nx = 1\n```\n"
        "```python\n!echo\n```\nmore\n<!-- cell -->\n```bash\nls\n```\n"
    )
    nb = load_builder().notebook(load_builder().parse(source))
    kinds = [(cell.cell_type, cell.source) for cell in nb.cells]
    assert kinds == [
        ("markdown", "# Title\n\nprose"),
        ("code", "%%handler x\nx = 1"),
        ("code", "!echo"),
        ("markdown", "more"),
        ("markdown", "```bash\nls\n```"),  # only ```python opens a code cell
    ]
    assert nb.cells[1].metadata.tags == ["check-a", "b"]
    assert nb.cells[1].id == "check-a"
    assert len({cell.id for cell in nb.cells}) == len(nb.cells)
    with pytest.raises(ValueError, match="unclosed"):
        load_builder().parse("```python\nx = 1\n")


@pytest.fixture
def notebook_dir(root: Path, tmp_path: Path) -> Path:
    """The notebook's folder, inside the server's root as Jupyter has it: the archives it
    builds in its `jupyter_serve_work` folder can then be registered by path."""
    folder = root / "notebooks" / tmp_path.name
    folder.mkdir(parents=True)
    return folder


# ---- the notebooks --------------------------------------------------------------------


def test_quickstart(
    server: ServeProcess, child_kernel_env: dict[str, str], notebook_dir: Path
) -> None:
    try:
        run = execute("01_quickstart", child_kernel_env, notebook_dir)
        serving = registered(server)
    finally:
        unregister(server, "celsius")
    connected = run.text("check-connect")
    assert f"server {server.url} (found through runtime file jpserver-" in connected
    assert connected.endswith(": Healthy\n")
    assert "Handler 'celsius': class Converter in handler.py" in run.text("check-handler")
    tried = run.text("check-try")
    assert "celsius: model ready" in tried  # the handler's own print, shown in the notebook
    assert json_after_status(tried[tried.index("HTTP 200") :]) == {
        "celsius": 100.0,
        "fahrenheit": 212.0,
    }
    failed = run.text("check-try-error")
    assert "HTTP 503" in failed
    # the handler's traceback shows once, on the cell's stderr, as the worker code prints it
    traceback = run.stderr_of("check-try-error")
    assert traceback.count("ValueError: could not convert string to float: 'warm'") == 1
    assert 'Model "celsius" Version: 1.0 registered with 1 initial workers' in run.text(
        "check-serve"
    )
    assert (notebook_dir / "jupyter_serve_work" / "model_store" / "celsius.mar").is_file()
    assert "200 {'celsius': 37.0, 'fahrenheit': 98.6}" in run.text("check-urllib")
    assert json.loads(run.text("check-curl")) == {"celsius": -40.0, "fahrenheit": -40.0}
    assert "{'celsius': 0.0, 'fahrenheit': 32.0}" in run.text("check-client")
    (dashboard,) = run.widgets("check-dashboard-widget")
    assert dashboard.startswith("ModelDashboard(")
    shown = run.text("check-dashboard")
    assert re.search(r"celsius 1\.0: Healthy; workers: \d+ READY pid \d+", shown), shown
    assert "celsius" in serving  # "Run All" leaves it to look at
    assert_no_cleanup_cell(run)
    assert run.stderr(skip=("check-try-error",)) == ""  # where the traceback is logged


def test_batching_and_scaling(
    server: ServeProcess, kernel_env: dict[str, str], notebook_dir: Path
) -> None:
    try:
        run = execute("02_batching_and_scaling", kernel_env, notebook_dir)
        serving = registered(server)
    finally:
        unregister(server, "squares")
    assert 'Model "squares" Version: 1.0 registered with 1 initial workers' in run.text(
        "check-handler"
    )
    (dashboard,) = run.widgets("check-dashboard-widget")
    assert dashboard.startswith("ModelDashboard(")
    load = run.text("check-load")
    assert "64 answers, all correct" in load
    batches = [tuple(map(int, m)) for m in re.findall(r"batches of (\d+): (\d+) \((\d+)", load)]
    assert sum(requests for _, _, requests in batches) == 64
    assert all(1 <= size <= 8 and count * size == requests for size, count, requests in batches)
    assert max(size for size, _, _ in batches) > 1  # 16 clients at once share batches
    metrics = run.text("check-metrics")
    assert "requests: 64, batches: " in metrics
    assert re.search(r"mean batch size [\d.]+ of 8 \(batch fill \d+%\)", metrics)
    assert 'ts_inference_requests_total{model_name="squares"' in metrics
    assert "Workers scaled to 2 for model: squares" in run.text("check-scale")
    workers = run.text("check-workers")
    assert "batch size 8, workers 2" in workers
    assert len(re.findall(r"worker \d+: READY, pid \d+", workers)) == 2
    spread = run.text("check-spread")
    assert "64 answers, all correct" in spread
    assert "workers that answered: 2" in spread
    assert "squares" in serving  # "Run All" leaves it to look at
    assert_no_cleanup_cell(run)
    assert run.stderr() == ""


def test_archives(server: ServeProcess, kernel_env: dict[str, str], notebook_dir: Path) -> None:
    run = execute("03_archives", kernel_env, notebook_dir)
    accuracy = re.search(r"training accuracy ([\d.]+)%", run.text("check-train"))
    assert accuracy, run.text("check-train")
    assert float(accuracy.group(1)) > 90
    assert "model_store/circle.mar" in run.text("check-build")
    inspected = run.text("check-inspect")
    for expected in ('"modelFile": "circle_model.py"', '"serializedFile": "circle.pt"'):
        assert expected in inspected
    for member in ("circle.pt", "circle_handler.py", "index_to_name.json", "MAR-INF/MANIFEST.json"):
        assert re.search(rf"^\s+\d+  {re.escape(member)}$", inspected, re.M), member
    folder = notebook_dir / "jupyter_serve_work" / "archives" / "model_store" / "circle_folder"
    manifest = json.loads((folder / "MAR-INF" / "MANIFEST.json").read_text())
    assert manifest["model"]["modelName"] == "circle_folder"
    assert "MANIFEST.json" in run.text("check-cli")
    assert 'Model "circle" Version: 1.0 registered with 1 initial workers' in run.text(
        "check-register"
    )
    predicted = run.text("check-predict")
    assert predicted.startswith("HTTP 200")
    probabilities = json_after_status(predicted)
    assert set(probabilities) == {"inside", "outside"}
    assert probabilities["inside"] > probabilities["outside"]  # (0.1, -0.2) is inside
    assert run.text("check-ts-predict").split("\n")[1] == "outside"  # (1.5, 1.5) is not
    listed = run.text("check-list")  # the value of `%serve list`, shown by IPython
    assert re.search(r"'modelName': 'circle',\s+'modelUrl': '/.*/circle\.mar'", listed)
    assert re.search(r"'modelName': 'ts_circle',\s+'modelUrl': '/.*/ts_circle\.mar'", listed)
    cleanup = run.text("check-cleanup")
    assert 'Model "circle" unregistered' in cleanup
    assert 'Model "ts_circle" unregistered' in cleanup
    assert not {"circle", "ts_circle"} & set(registered(server))
    assert run.stderr() == ""


def test_explanations(server: ServeProcess, kernel_env: dict[str, str], notebook_dir: Path) -> None:
    run = execute("04_explanations", kernel_env, notebook_dir)
    accuracy = re.search(r"test accuracy ([\d.]+)%", run.text("check-train"))
    assert accuracy, run.text("check-train")
    assert float(accuracy.group(1)) > 90
    assert 'Model "digits" Version: 1.0 registered with 1 initial workers' in run.text(
        "check-serve"
    )
    explained = run.text("check-explain")
    labels = re.search(r"label (\d), predicted (\d)", explained)
    assert labels, explained
    assert labels.group(1) == labels.group(2)
    assert "attributions: (8, 8)" in explained
    sums = re.search(
        r"sum of attributions (-?[\d.]+), logit change (-?[\d.]+)", run.text("check-complete")
    )
    assert sums, run.text("check-complete")
    total, change = float(sums.group(1)), float(sums.group(2))
    assert abs(total - change) <= 0.05 * abs(change)  # integrated gradients' completeness
    for tag in ("check-view", "check-magic-explain"):
        (image,) = run.widgets(tag)
        assert image.startswith("Image(value=b'\\x89PNG"), tag
    assert run.text("check-bars").count('<g class="bar"') == 10
    assert 'Model "digits" unregistered' in run.text("check-cleanup")
    assert "digits" not in registered(server)
    assert run.stderr() == ""


def test_export(server: ServeProcess, kernel_env: dict[str, str], notebook_dir: Path) -> None:
    run = execute("05_export", kernel_env, notebook_dir)
    assert re.search(r"learned y = 3\.\d\dx \+ 1\.\d\d", run.text("check-train"))
    assert 'Model "line" Version: 1.0 registered with 1 initial workers' in run.text("check-serve")
    predicted = run.text("check-predict")
    assert json_after_status(predicted[predicted.index("HTTP 200") :])["x"] == 2.0
    exported = notebook_dir / "exported"
    assert f"Exported 1 model version to {exported}:" in run.text("check-export")
    layout = run.text("check-layout")
    for name in ("model-store/line.mar", "config/config.properties", "inferenceservice.yaml",
                 "README.md"):  # fmt: skip
        assert re.search(rf"^\s+\d+  {re.escape(name)}$", layout, re.M), name
    config = run.text("check-config")
    assert "model_store=/mnt/models/model-store" in config
    assert '"batchSize": 4' in config
    assert '"maxBatchDelay": 20' in config
    service = yaml.safe_load(run.text("check-isvc"))
    validate_inference_service(service)
    assert service["spec"]["predictor"]["model"]["modelFormat"] == {"name": "pytorch"}
    assert "## What did not carry over" in run.text("check-readme")
    assert 'Model "line" unregistered' in run.text("check-cleanup")
    assert "line" not in registered(server)
    assert run.stderr() == ""


def test_language_model(server: ServeProcess, kernel_env: dict[str, str],
                        notebook_dir: Path) -> None:  # fmt: skip
    try:
        run = execute("06_language_model", kernel_env, notebook_dir)
    finally:
        unregister(server, "tinylm")
    trained = re.search(r"trained (\d+) steps in [\d.]+ s, loss ([\d.]+)", run.text("check-train"))
    assert trained, run.text("check-train")
    assert int(trained.group(1)) > 0  # as many as the minute allows: no timing threshold
    assert "model.safetensors" in run.text("check-train")
    assert "tinylm.mar" in run.text("check-build")
    assert 'Model "tinylm" Version: 1.0 registered with 1 initial workers' in run.text(
        "check-register"
    )
    figures = r"\[(\d+) tokens \((length|stop)\) · first token \d+ ms · [\d.]+ tokens/s\]"
    chat = re.search(figures, run.text("check-chat"))
    assert chat, run.text("check-chat")
    assert run.text("check-chat").index(chat.group(0)) > 0  # the answer came first
    answered = run.text("check-openai")
    assert "models: ['tinylm', 'tinylm/1.0']" in answered
    assert re.search(r"\d+ tokens, first after \d+ ms, \d+ tokens/s", answered), answered
    assert re.search(r"8 answers, \d+ tokens in [\d.]+ s", run.text("check-concurrent"))
    assert_no_cleanup_cell(run)
    assert run.stderr() == ""
