"""`ServeApp`: the jupyter_server extension that serves models under `{base_url}serve/`.

The server process never runs model code: it owns the routes and, as the
serving runtime lands, the registry, batchers and worker pool.
"""

from __future__ import annotations

from pathlib import Path

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import url_path_join
from traitlets import Unicode, default

from .routes import ROUTES


class ServeApp(ExtensionApp):
    """Serve PyTorch models from the Jupyter server, TorchServe-compatible."""

    name = "jupyter_serve"
    description = __doc__

    url_prefix = Unicode(
        "serve", config=True, help="Path under the server's base_url for every route."
    )
    model_store = Unicode(
        config=True,
        help="Folder holding model archives (.mar) that `url=name.mar` refers to. "
        "Default: `model_store` under the server's root directory.",
    )

    @default("model_store")
    def _default_model_store(self) -> str:
        root = getattr(self.serverapp, "root_dir", None) or "."
        return str(Path(root) / "model_store")

    def initialize_handlers(self) -> None:
        prefix = self.url_prefix.strip("/")
        self.handlers.extend((url_path_join(prefix, pattern), route) for pattern, route in ROUTES)

    def initialize_settings(self) -> None:
        self.settings.update({"serve_model_store": self.model_store})

    async def stop_extension(self) -> None:
        """Stop everything the extension started (workers, once they exist)."""
