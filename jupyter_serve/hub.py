"""`jupyter_serve.hub`: the public import path of the JupyterHub authorizer
(`server/hub.py`), as hub configs name it:
`c.ServerApp.authorizer_class = "jupyter_serve.hub.HubScopesAuthorizer"`."""

from __future__ import annotations

from jupyter_serve.server.hub import HubScopesAuthorizer

__all__ = ["HubScopesAuthorizer"]
