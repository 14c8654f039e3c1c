"""Who may do what under `{base_url}serve/`: jupyter_server's own decisions, per verb.

Every verb of every route is wrapped by `allow(action)`, which is tornado's
`@web.authenticated` (a user is required: 403 without one) around jupyter_server's
`@authorized(action, resource="serve")` (the server's `Authorizer` decides), as
jupyter_server's own kernel and contents handlers are. The actions:

* ``read``: ping, list and describe models, metrics, logs, the API description, the
  KServe health, readiness and metadata routes;
* ``execute``: run a model (predictions, explanations, invocations, the legacy
  ``predict``, KServe ``infer``/``explain``/``:predict``);
* ``write``: change what is served (register, scale, set-default, unregister) and the
  inference keys.

So an admin's policy can say "may predict, may not register" (``execute`` but not
``write`` on ``serve``): a JupyterHub or custom `Authorizer` is asked with exactly
these words. A refusal answers 403 with TorchServe's error body and runs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

RESOURCE = "serve"
READ = "read"
EXECUTE = "execute"
WRITE = "write"
ACTIONS = (READ, EXECUTE, WRITE)


def allow(action: str) -> Callable[[Callable[..., Any]], Any]:
    """Require an authenticated user whom the authorizer lets `action` on `serve`.

    The wrapped method keeps its action as `serve_action` (the route crawl reads it).
    """
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {ACTIONS}")

    def wrap(method: Callable[..., Any]) -> Any:
        checked: Any = web.authenticated(authorized(action, resource=RESOURCE)(method))
        checked.serve_action = action
        return checked

    return wrap
