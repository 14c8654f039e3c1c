"""IPython magics: `%%handler`, `%mar`, `%serve`. Loaded with `%load_ext jupyter_serve`.

    %%handler NAME [--class C | --function F] [--model-file F] [--serialized-file F]
                   [--extra-files A,B] [--serve] [--batch-size N]
                   [--max-batch-delay MS] [--workers N] [--version V] [--debug]
    %mar [--debug] build <torch-model-archiver flags>   %mar inspect X.mar
                   (a missing --export-path folder is made)
    %serve connect URL [--token T]               %serve try NAME [DATA | --file F | --json J]
    %serve register URL [--model-name N] [--batch-size N] [--max-batch-delay MS]
                        [--workers N] [--handler H] [--overwrite]
    %serve scale NAME --min N [--max M] [--version V]
    %serve unregister NAME [--version V]         %serve list      %serve describe NAME
    %serve logs NAME [--version V] [--lines N]   (recent worker output, tracebacks included)
    %serve predict NAME [DATA | --file F | --json J]   (explain: the same, drawn)
    %serve dashboard [--interval S]
    %serve chat MODEL "PROMPT" [--max-tokens N] [--temperature T] [--seed S] [--system S]
                      (a language model's answer streamed into the cell: kernel/chat.py)
    %serve keys list | create [--name N] [--models a,b] | revoke ID   (inference keys)
    %serve export DIR [--models a,b] [--force] [--protocol v1|v2] [--storage-uri U]
                      (the served models as TorchServe/KServe files: jupyter_serve.export)

The handler cell is written to a file and runs from that file: notebook
variables are NOT visible to it (workers are separate processes).

`%serve register PATH` takes this kernel's files: an archive the server cannot read
where it is gets uploaded into its model store first (`--overwrite` replaces one of
the same name there). A failure prints one line with what to do (`failures.py`);
`%serve --debug ...`, `%mar --debug ...` and `%%handler ... --debug` raise it instead.

The magics' argument parsers are in magic_parsers.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import threading
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from jupyter_serve.archive import (
    ArchiveListing,
    ArchiveSpec,
    archiver_parser,
    build_mar,
    inspect_archive,
)
from jupyter_serve.kernel import workspace
from jupyter_serve.kernel.chat import chat
from jupyter_serve.kernel.client import (
    TOKEN_ENV,
    URL_ENV,
    ServeClient,
    ServeClientError,
    ServerInfo,
    ServerNotFound,
    UploadError,
    current_kernel_id,
    discover,
)
from jupyter_serve.kernel.failures import one_line_failures
from jupyter_serve.kernel.magic_parsers import UsageParser, handler_parser, serve_parser
from jupyter_serve.kernel.workspace import HandlerFolder
from jupyter_serve.wire.errors import ServeError
from jupyter_serve.wire.protocol import InferenceResult

PROGRESS_INTERVAL = 0.5  # seconds between looks at a loading model's worker output


class LogFollower:
    """Prints a model's worker output lines it has not printed yet (progress while loading)."""

    def __init__(self, client: ServeClient, name: str) -> None:
        self.client, self.name = client, name
        self.shown = len(self._lines())  # lines of an earlier, failed attempt are old news

    def _lines(self) -> list[str]:
        try:
            return self.client.logs(self.name, None, 1000)
        except ServeClientError:  # not registered yet, or gone
            return []

    def print_new(self) -> None:
        lines = self._lines()
        if len(lines) < self.shown:  # a new buffer (the model was registered again)
            self.shown = 0
        for line in lines[self.shown :]:
            print(f"  | {line}")
        self.shown = len(lines)


def _capture(outcome: dict[str, Any], function: Any, *args: Any, **kwargs: Any) -> None:
    try:
        outcome["result"] = function(*args, **kwargs)
    except Exception as error:  # handed back to the magic's thread
        outcome["error"] = error


def _version_taken(error: BaseException | None) -> bool:
    """A register's 409 (this name and version are served), not an upload's."""
    upload = isinstance(error, UploadError)
    return isinstance(error, ServeClientError) and not upload and error.status == 409


def taken_hint(name: str, message: str) -> str:
    """The way out of a register's 409, from TorchServe's "Model version V is already
    registered for model M" (server/registry/registry.py)."""
    words = message.split()
    version = words[2] if words[:2] == ["Model", "version"] and len(words) > 2 else "V"
    major = version.split(".")[0]
    other = f"{int(major) + 1}.0" if major.isdigit() else "2.0"
    return (
        f"register another version: build the archive with --version {other} (%mar build), "
        f"or unregister this one first: %serve unregister {name} --version {version}"
    )


def request_body(args: argparse.Namespace) -> tuple[bytes, str]:
    """The body and content type `DATA | --file | --json` ask for."""
    if args.file:
        return Path(args.file).read_bytes(), "application/octet-stream"
    if args.json is not None:
        json.loads(args.json)  # refuse malformed JSON here, with a clear message
        return args.json.encode(), "application/json"
    return (args.data or "").encode(), "text/plain"


def show_listing(listing: ArchiveListing) -> None:
    """`%mar inspect`: the manifest, then every member's size and name."""
    manifest = listing.manifest.to_dict() if listing.manifest else None
    print(json.dumps(manifest, indent=2))
    for name, size in listing.files:
        print(f"{size:>12}  {name}")


def syntax_error_lines(error: SyntaxError) -> str:
    """The error at the line the editor shows: the `%%handler` line is the cell's line 1,
    so the body's line N (what `compile` counts) is the cell's line N + 1."""
    text = (error.text or "").rstrip("\r\n")
    caret = " " * max((error.offset or 1) - 1, 0) + "^"
    line = (error.lineno or 0) + 1
    return f"SyntaxError in cell line {line}: {error.msg}\n{text}\n{caret}"


def show_result(result: InferenceResult) -> None:
    print(f"HTTP {result.status}  content-type: {result.content_type or '(not set)'}")
    for name, value in result.headers.items():
        print(f"{name}: {value}")
    text = result.body.decode("utf-8", "replace")
    try:
        print(json.dumps(json.loads(text), indent=2))
    except ValueError:
        print(text)


@magics_class
class ServeMagics(Magics):
    """The magics; `self.folders` remembers every `%%handler` of this kernel."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.folders: dict[str, HandlerFolder] = {}
        self.server: ServerInfo | None = None
        self.background: Any = None  # a BackgroundServer this kernel started, if any

    @property
    def client(self) -> ServeClient:
        if self.server is None:
            try:
                self.server = discover(kernel_id=current_kernel_id())
            except ServerNotFound:
                self.server = self._start_own_server()
        return ServeClient(self.server)

    def _start_own_server(self) -> ServerInfo:
        """No Jupyter server around (plain IPython, other front ends): start one on loopback."""
        from jupyter_serve.kernel.background import start_background_server

        print("No Jupyter server found: starting a jupyter_serve server on loopback...")
        self.background = start_background_server()
        info: ServerInfo = self.background.info
        os.environ[URL_ENV], os.environ[TOKEN_ENV] = info.url, info.token
        print(f"Serving at {info.url} (token in $JUPYTER_SERVE_TOKEN; stops with the kernel)")
        return info

    @cell_magic
    def handler(self, line: str, cell: str) -> None:
        """Write the cell as a model handler, check it, optionally serve it."""
        args = handler_parser().parse_args(shlex.split(line))
        try:
            folder = workspace.write_handler(
                args.name, cell, entry=args.entry, model_file=args.model_file,
                serialized_file=args.serialized_file,
                extra_files=[f for f in args.extra_files.split(",") if f], version=args.version,
            )  # fmt: skip
        except SyntaxError as error:
            print(syntax_error_lines(error))
            return
        self.folders[args.name] = folder
        try:
            entry = workspace.check_resolves(folder)
        except ServeError as error:  # the loader's HandlerLoadError: file, entry point, cause
            print(f"Handler {args.name!r} does not load as a worker would load it:\n{error}")
            return
        print(f"Handler {args.name!r}: {entry} ({folder.path})")
        if args.serve:
            with one_line_failures("Register", self.server_url, debug=args.debug):
                self._serve_folder(folder, args)

    def server_url(self) -> str | None:
        return self.server.url if self.server is not None else None

    def _serve_folder(self, folder: HandlerFolder, args: argparse.Namespace) -> None:
        mar = workspace.build_handler_mar(folder, folder.path.parent / "model_store")
        print(f"Built {mar}; starting {args.workers} worker(s)...")
        params = {
            "overwrite": True,  # the cell is the source: its archive replaces an older one
            "model_name": folder.name,
            "batch_size": args.batch_size,
            "max_batch_delay": args.max_batch_delay,
            "initial_workers": args.workers,
        }
        if self._register(str(mar.resolve()), folder.name, **params) is not None:
            # Re-running the cell is the edit loop: the cell replaces the version it serves.
            print(f"Replacing the served {folder.name} {folder.version} with this cell...")
            self.client.unregister(folder.name, folder.version)
            self._register(str(mar.resolve()), folder.name, **params)

    def _register(self, url: str, name: str, **params: Any) -> ServeClientError | None:
        """Register synchronously, streaming the workers' output while they load.

        On failure the rest of that output (the worker's traceback) follows the error.
        Returns the 409 when this name and version are already registered, else None;
        any other failure is raised.
        """
        follower = LogFollower(self.client, name)
        outcome: dict[str, Any] = {}
        call = threading.Thread(target=_capture, args=(outcome, self.client.register, url),
                                kwargs={"synchronous": True, **params})  # fmt: skip
        call.start()
        while call.is_alive():
            call.join(PROGRESS_INTERVAL)
            follower.print_new()
        follower.print_new()
        error = outcome.get("error")
        if isinstance(error, ServeClientError) and _version_taken(error):
            return error  # for the caller to resolve
        if error is not None:
            raise error
        result = outcome["result"]
        if "uploaded" in result:
            print(f"Uploaded {url} into the server's model store as {result['uploaded']}.")
        print(result.get("status", result))
        return None

    @line_magic
    def mar(self, line: str) -> None:
        """`%mar [--debug] build <torch-model-archiver flags>` or `%mar inspect X.mar`."""
        words = shlex.split(line)
        debug = words[:1] == ["--debug"]
        words = words[1:] if debug else words
        if words[:1] == ["inspect"] and len(words) == 2:
            with one_line_failures("Inspect", debug=debug):
                show_listing(inspect_archive(words[1]))
            return
        if words[:1] != ["build"]:
            raise UsageError("usage: %mar [--debug] build <archiver flags> | %mar inspect X")
        spec = ArchiveSpec.from_args(archiver_parser("%mar build", parser_class=UsageParser)
                                     .parse_args(words[1:]))  # fmt: skip
        with one_line_failures("Build", debug=debug):
            export = Path(spec.export_path)
            if not export.exists():  # the folder the archive goes to, made as `mkdir -p`
                export.mkdir(parents=True)
                print(f"Created the folder {spec.export_path}.")
            print(build_mar(spec))

    @line_magic
    def serve(self, line: str) -> Any:
        """Talk to the serving Jupyter server, or try a `%%handler` in this kernel."""
        args = serve_parser().parse_args(shlex.split(line))
        what = args.command.capitalize() + (f" {args.action}" if args.command == "keys" else "")
        with one_line_failures(what, self.server_url, debug=args.debug):
            return getattr(self, f"_serve_{args.command}")(args)
        return None

    def _serve_connect(self, args: argparse.Namespace) -> None:
        self.server = discover(args.url, args.token)
        print(f"Connected to {self.server.url}: {self.client.ping()['status']}")

    def _serve_try(self, args: argparse.Namespace) -> workspace.TryResult:
        folder = self.folders.get(args.name)
        if folder is None:
            raise UsageError(f"No %%handler {args.name!r} in this kernel yet.")
        outcome = workspace.try_handler(folder.path, workspace.make_request(*request_body(args)))
        if outcome.result is not None:
            show_result(outcome.result)
        else:  # the traceback is already on the cell's stderr: the worker code printed it
            print(f"HTTP {outcome.status}: {outcome.error.get('message')}")
        return outcome

    def _serve_predict(self, args: argparse.Namespace, explain: bool = False) -> None:
        body, content_type = request_body(args)
        answer = self.client.predict(args.name, body, content_type=content_type, explain=explain)
        result = InferenceResult("", answer.status, answer.body, answer.headers.get("Content-Type"))
        show_result(result)

    def _serve_explain(self, args: argparse.Namespace) -> Any:
        """The explanation, drawn by the viewer (heatmap, coloured tokens or bars)."""
        from jupyter_serve.kernel.widgets import show_explanation

        body, content_type = request_body(args)
        answer = self.client.predict(args.name, body, content_type=content_type, explain=True)
        image = body if content_type == "application/octet-stream" else None
        return show_explanation(answer.body, image=image)

    def _serve_chat(self, args: argparse.Namespace) -> None:
        """Stream a language model's answer into the cell (kernel/chat.py)."""
        chat(self.client, args.name, args.prompt, system=args.system,
             max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed)  # fmt: skip

    def _serve_dashboard(self, args: argparse.Namespace) -> Any:
        """A live dashboard of the server's models (polls on the kernel's event loop)."""
        from jupyter_serve.kernel.widgets import ModelDashboard

        return ModelDashboard(self.client, interval=args.interval)

    def _serve_register(self, args: argparse.Namespace) -> None:
        name = args.model_name or Path(args.url).name.split(".", 1)[0]
        taken = self._register(
            args.url, name, model_name=args.model_name, handler=args.handler,
            batch_size=args.batch_size, max_batch_delay=args.max_batch_delay,
            initial_workers=args.workers, overwrite=args.overwrite,
        )  # fmt: skip
        if taken is not None:
            taken.hint = taken_hint(name, taken.message)
            raise taken

    def _serve_logs(self, args: argparse.Namespace) -> None:
        found = self.client.logs(args.name, args.version, args.lines)
        print("\n".join(found) if found else "(no worker output)")

    def _serve_scale(self, args: argparse.Namespace) -> None:
        answer = self.client.scale(
            args.name, args.version, min_worker=args.min, max_worker=args.max, synchronous=True
        )
        print(answer.get("status", answer))

    def _serve_unregister(self, args: argparse.Namespace) -> None:
        print(self.client.unregister(args.name, args.version).get("status"))

    def _serve_list(self, args: argparse.Namespace) -> list[dict[str, Any]]:
        """The models (IPython shows the value; `x = %serve list` keeps it quietly)."""
        return self.client.list_models()

    def _serve_describe(self, args: argparse.Namespace) -> list[Any]:
        return self.client.describe(args.name, args.version)

    def _serve_keys(self, args: argparse.Namespace) -> Any:
        """Inference keys: `list` and `create` return their JSON (`create`'s has the key,
        shown this once); keys may only run models, never open kernels."""
        if args.action == "list":
            return self.client.list_keys()
        if args.action == "revoke":
            print(self.client.revoke_key(args.key_id)["status"])
            return None
        models = [name for name in args.models.split(",") if name.strip()] or None
        minted = self.client.create_key(args.name, models)
        print(f"Key {minted['id']} created: its key is shown only now; store it safely.")
        return minted

    def _serve_export(self, args: argparse.Namespace) -> Any:
        """Write the served models as TorchServe/KServe files; returns the `ExportResult`."""
        from jupyter_serve.export import export_in_notebook

        return export_in_notebook(args, lambda: self.client)


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics (`%load_ext jupyter_serve`)."""
    ipython.register_magics(ServeMagics(ipython))
