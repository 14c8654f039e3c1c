"""`ModelDashboard`: the live view of a server's models, built from stock ipywidgets.

`ModelDashboard.update(snapshot)` is the whole rendering: a pure function of a
`DashboardSnapshot` (banner, then one `ModelCard` per model version), so tests
build snapshots by hand and assert on children and values. With a client, a
`Poller` feeds it on the kernel's event loop; `close()` stops the polling.
Each card has the actions scale (`IntText` + `Button`) and unregister (a
`Button` asking for confirmation), which go through an `Actions` object (the
client by default) and then ask the poller for a fresh snapshot.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import ipywidgets as w

from jupyter_serve.kernel.client import ServeClient, ServeClientError
from jupyter_serve.kernel.widgets import render
from jupyter_serve.kernel.widgets.fetch import fetch_snapshot
from jupyter_serve.kernel.widgets.poller import Poller
from jupyter_serve.kernel.widgets.snapshot import DashboardSnapshot, ModelKey, ModelView, Trend

__all__ = ["Actions", "ClientActions", "ModelCard", "ModelDashboard", "render_snapshot"]

_HIDDEN, _SHOWN = "none", "flex"


class Actions(Protocol):
    """The management calls behind the dashboard's buttons; each returns a message."""

    def scale(self, name: str, version: str, workers: int) -> str: ...

    def unregister(self, name: str, version: str) -> str: ...


Fetch = Callable[[DashboardSnapshot | None], DashboardSnapshot]
"""Where snapshots come from: given the last good one (for trends), the next."""

Act = Callable[[str, Callable[[Actions], str]], None]
"""How a card runs an action: `act(description, call)`, `call` given the `Actions`."""


class ClientActions:
    """`Actions` through the management routes of a `ServeClient`."""

    def __init__(self, client: ServeClient) -> None:
        self.client = client

    def scale(self, name: str, version: str, workers: int) -> str:
        answer = self.client.scale(name, version, min_worker=workers, max_worker=workers)
        return str(answer.get("status", answer))

    def unregister(self, name: str, version: str) -> str:
        return str(self.client.unregister(name, version).get("status", ""))


class ModelCard(w.VBox):  # type: ignore[misc]
    """One model version: header, load state, workers, live figures and actions."""

    def __init__(self, key: ModelKey, act: Act) -> None:
        self.key = key
        self._act = act
        self._shown_workers: int | None = None
        self.header, self.state = w.HTML(), w.HTML()
        self.workers, self.stats = w.HTML(), w.HTML()
        self.workers_input = w.IntText(value=1, description="workers", layout={"width": "160px"})
        self.scale_button = w.Button(description="Scale", icon="sliders")
        self.unregister_button = w.Button(
            description="Unregister", button_style="danger", icon="trash"
        )
        self.confirm_label = w.Label(f"Unregister {key[0]} version {key[1]}?")
        self.confirm_button = w.Button(description="Yes, unregister", button_style="danger")
        self.cancel_button = w.Button(description="Cancel")
        self.confirm_box = w.HBox(
            [self.confirm_label, self.confirm_button, self.cancel_button],
            layout={"display": _HIDDEN},
        )
        self._wire()
        actions = w.HBox([self.workers_input, self.scale_button, self.unregister_button])
        children = [self.header, self.state, self.workers, self.stats, actions, self.confirm_box]
        super().__init__(children, layout={"border": "1px solid #ddd", "padding": "4px"})

    def _wire(self) -> None:
        self.scale_button.on_click(lambda _: self.scale())
        self.unregister_button.on_click(lambda _: self.ask_unregister())
        self.confirm_button.on_click(lambda _: self.unregister())
        self.cancel_button.on_click(lambda _: self.cancel())

    def update(self, model: ModelView, trend: Trend) -> None:
        """Show `model` and its figures; the worker count follows the server's when it moves."""
        self.header.value = render.header_html(model)
        self.state.value = render.state_html(model)
        self.workers.value = render.workers_html(model)
        self.stats.value = render.stats_html(model, trend)
        if model.min_workers != self._shown_workers:
            self.workers_input.value = self._shown_workers = model.min_workers

    @property
    def confirming(self) -> bool:
        return bool(self.confirm_box.layout.display == _SHOWN)

    def scale(self) -> None:
        name, version = self.key
        count = int(self.workers_input.value)
        self._act(f"scale {name} to {count}", lambda actions: actions.scale(name, version, count))

    def ask_unregister(self) -> None:
        self.confirm_box.layout.display = _SHOWN

    def cancel(self) -> None:
        self.confirm_box.layout.display = _HIDDEN

    def unregister(self) -> None:
        self.cancel()
        name, version = self.key
        self._act(f"unregister {name}", lambda actions: actions.unregister(name, version))


class ModelDashboard(w.VBox):  # type: ignore[misc]
    """Models, workers and live figures of one server; see the module docstring.

    Args:
        client: the server to watch and act on (`client.ServeClient`).
        fetch: where snapshots come from instead of `fetch_snapshot(client, last)`.
        actions: the scale/unregister calls; the client's management routes by default.
        interval: seconds between polls.
        start: poll at once on the current (the kernel's) event loop.
    """

    def __init__(
        self,
        client: ServeClient | None = None,
        *,
        fetch: Fetch | None = None,
        actions: Actions | None = None,
        interval: float = 2.0,
        start: bool = True,
    ) -> None:
        self.client = client
        self.actions = actions or (ClientActions(client) if client is not None else None)
        self.snapshot: DashboardSnapshot | None = None
        self._last_good: DashboardSnapshot | None = None
        self.cards: dict[ModelKey, ModelCard] = {}
        self.banner = w.HTML(render.banner_html(DashboardSnapshot()))
        self.cards_box = w.VBox([])
        self.message = w.HTML("")
        self.poller: Poller[DashboardSnapshot] | None = None
        if fetch is None and client is not None:
            fetch = partial(fetch_snapshot, client)
        self._source = fetch
        if fetch is not None:
            self.poller = Poller(self._fetch, self.update, self.show_error, interval=interval)
        super().__init__([self.banner, self.cards_box, self.message])
        if self.poller is not None and start:
            self.poller.start()

    def _fetch(self) -> DashboardSnapshot:
        assert self._source is not None
        return self._source(self._last_good)

    def update(self, snapshot: DashboardSnapshot) -> None:
        """Render `snapshot`: the banner and one card per model version, in its order."""
        self.snapshot = snapshot
        if snapshot.unreachable is None:
            self._last_good = snapshot
        self.banner.value = render.banner_html(snapshot)
        keys = [model.key for model in snapshot.models]
        self.cards = {key: self.cards.get(key) or ModelCard(key, self._act) for key in keys}
        for model in snapshot.models:
            self.cards[model.key].update(model, snapshot.trends.get(model.key, Trend()))
        self.cards_box.children = tuple(self.cards[key] for key in keys)

    def show_error(self, error: Exception) -> None:
        """Keep the last figures but say plainly that the server cannot be reached."""
        self.update((self.snapshot or DashboardSnapshot()).stale(_reason(error)))

    def _act(self, what: str, call: Callable[[Actions], str]) -> None:
        if self.actions is None:
            self.message.value = _failed(what, "this dashboard has no server to act on")
            return
        try:
            answer = call(self.actions)
        except (ServeClientError, OSError) as error:
            self.message.value = _failed(what, _reason(error))
        else:
            self.message.value = html.escape(f"{what}: {answer}")
        if self.poller is not None:
            self.poller.poke()

    def close(self) -> None:
        """Stop polling, then close the widgets."""
        if self.poller is not None:
            self.poller.stop()
        for card in self.cards.values():
            card.close()
        super().close()


def _failed(what: str, reason: str) -> str:
    return f'<span style="color:#b00020">{html.escape(f"{what} failed: {reason}")}</span>'


def _reason(error: BaseException) -> str:
    """A short text for an error: the server's message, or the network's reason."""
    if isinstance(error, ServeClientError):
        return f"{error.status} {error.error_type}: {error.message}"
    return str(getattr(error, "reason", None) or error) or type(error).__name__


def render_snapshot(snapshot: DashboardSnapshot, **kwargs: Any) -> ModelDashboard:
    """A dashboard without a server, showing `snapshot` (for tests and static display)."""
    dashboard = ModelDashboard(**kwargs)
    dashboard.update(snapshot)
    return dashboard
