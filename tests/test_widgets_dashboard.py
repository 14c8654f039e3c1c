"""ModelDashboard rendered from hand-made snapshots, headless: children and values."""

from __future__ import annotations

import urllib.error

import pytest

from jupyter_serve.kernel.client import ServeClientError
from jupyter_serve.kernel.widgets.dashboard import ModelCard, ModelDashboard, render_snapshot
from jupyter_serve.kernel.widgets.snapshot import DashboardSnapshot, ModelView, Trend, WorkerView

READY = WorkerView("9000", "READY", pid=4242, device="cpu", memory_bytes=300 * 2**20)
GPU = WorkerView(
    "9001", "READY", pid=4243, device="gpu", gpu_usage="gpuId::0 utilization.gpu::40 %"
)


def model(name: str = "mnist", version: str = "1.0", **changes: object) -> ModelView:
    fields: dict[str, object] = {
        "status": "Healthy",
        "min_workers": 2,
        "max_workers": 2,
        "batch_size": 8,
        "workers": (READY, GPU),
        "pending": 3,
        "remaining_capacity": 97,
    }
    fields.update(changes)
    return ModelView(name, version, **fields)  # type: ignore[arg-type]


def snapshot(*models: ModelView, **changes: object) -> DashboardSnapshot:
    trend = Trend(12.5, 4.0, 9.5, 0.75, (1.0, 12.5), (3.0, 4.0))
    fields: dict[str, object] = {
        "taken_at": 10.0,
        "models": models,
        "responses": {"2XX": 7, "4XX": 1, "5XX": 0},
        "trends": {m.key: trend for m in models},
    }
    fields.update(changes)
    return DashboardSnapshot(**fields)  # type: ignore[arg-type]


class FakeActions:
    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.error = error

    def scale(self, name: str, version: str, workers: int) -> str:
        self.calls.append(("scale", name, version, str(workers)))
        if self.error:
            raise self.error
        return "Processing worker updates..."

    def unregister(self, name: str, version: str) -> str:
        self.calls.append(("unregister", name, version))
        return f'Model "{name}" unregistered'


def card_of(dashboard: ModelDashboard, index: int = 0) -> ModelCard:
    card = dashboard.cards_box.children[index]
    assert isinstance(card, ModelCard)
    return card


def test_a_serving_model_shows_workers_queue_and_live_figures() -> None:
    dashboard = render_snapshot(snapshot(model()))
    assert dashboard.children == (dashboard.banner, dashboard.cards_box, dashboard.message)
    assert "1 model version" in dashboard.banner.value
    assert "2XX 7 · 4XX 1 · 5XX 0" in dashboard.banner.value
    card = card_of(dashboard)
    assert "<b>mnist</b> version 1.0 · Healthy · batch size 8" in card.header.value
    assert "(default)" not in card.header.value
    assert card.state.value == ""  # serving: neither loading nor failed
    assert card.workers.value.count("<tr>") == 3  # head + 2 workers
    for text in ("4242", "300 MiB", "gpu", "utilization.gpu::40 %"):
        assert text in card.workers.value
    for text in ("3 pending", "12.50 req/s", "p50 <b>4.0 ms", "p99 <b>9.5 ms", "75%", "<polyline"):
        assert text in card.stats.value
    assert card.workers_input.value == 2


def test_memory_is_the_workers_own_share_with_what_it_counts_on_hover() -> None:
    forked = WorkerView("9002", "READY", pid=4244, memory_bytes=190 * 2**20,
                        own_memory_bytes=11 * 2**20)  # fmt: skip
    workers = card_of(render_snapshot(snapshot(model(workers=(forked, READY))))).workers.value
    assert ">11 MiB</td>" in workers  # what one more forked worker costs
    assert 'title="resident size (RSS): 190 MiB"' in workers
    assert "its share of the pages it shares with the worker factory" in workers  # the header
    assert (
        '<td style="padding:1px 8px;text-align:left" title="resident size (RSS)">300 MiB' in workers
    )


def test_the_sparklines_say_what_they_plot_its_last_value_and_range() -> None:
    stats = card_of(render_snapshot(snapshot(model()))).stats.value
    assert "throughput: 12.50 req/s (range 1.00 to 12.50)" in stats
    assert "p50: 4.0 ms (range 3.0 to 4.0)" in stats
    assert "<title>throughput: last 2 polls</title>" in stats


def test_the_default_version_is_marked() -> None:
    dashboard = render_snapshot(snapshot(model(is_default=True)))
    assert "version 1.0 (default) · Healthy" in card_of(dashboard).header.value


def test_unknown_figures_show_a_dash_and_empty_history_says_no_data() -> None:
    dashboard = render_snapshot(snapshot(model(), trends={}))
    stats = card_of(dashboard).stats.value
    assert "throughput <b>—</b>" in stats
    assert "batch fill <b>—</b>" in stats
    assert stats.count("no data") == 2


def test_a_model_whose_workers_are_not_ready_shows_loading_with_their_states() -> None:
    starting = WorkerView("9002", "UNLOADING", pid=-1)
    dashboard = render_snapshot(snapshot(model(workers=(READY, starting))))
    state = card_of(dashboard).state.value
    assert "loading…" in state
    assert "1/2 workers ready" in state
    assert "1 READY, 1 UNLOADING" in state
    assert "<td" in card_of(dashboard).workers.value
    assert "—" in card_of(dashboard).workers.value


def test_a_model_with_no_workers_yet_is_loading_too() -> None:
    dashboard = render_snapshot(snapshot(model(workers=(), status="Unhealthy")))
    state = card_of(dashboard).state.value
    assert "loading…" in state
    assert "0/2 workers ready (starting workers)" in state
    assert "no workers" in card_of(dashboard).workers.value


def test_a_failed_load_shows_its_error_text_not_loading() -> None:
    failure = 'Traceback (most recent call last):\n  File "handler.py", line 3\nImportError: <x>'
    dashboard = render_snapshot(snapshot(model(workers=(), error=failure)))
    state = card_of(dashboard).state.value
    assert "load failed" in state
    assert "ImportError: &lt;x&gt;" in state  # escaped, shown verbatim
    assert "loading" not in state


def test_unreachable_keeps_the_last_figures_and_recovers() -> None:
    dashboard = render_snapshot(snapshot(model()))
    card = card_of(dashboard)
    dashboard.show_error(urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")))
    assert "server unreachable:" in dashboard.banner.value
    assert "Connection refused" in dashboard.banner.value
    assert card_of(dashboard) is card
    assert "4242" in card.workers.value
    dashboard.update(snapshot(model()))
    assert "unreachable" not in dashboard.banner.value
    assert "1 model version" in dashboard.banner.value


def test_unreachable_before_any_snapshot_and_server_errors_are_explained() -> None:
    dashboard = ModelDashboard()
    dashboard.show_error(ServeClientError(503, "ServiceUnavailableException", "busy"))
    assert "server unreachable:</b> 503 ServiceUnavailableException: busy" in dashboard.banner.value
    assert dashboard.cards_box.children == ()


def test_update_reuses_cards_orders_them_and_drops_unregistered_versions() -> None:
    dashboard = render_snapshot(snapshot(model("a"), model("b"), model("b", "2.0")))
    first = dict(dashboard.cards)
    dashboard.update(snapshot(model("b", "2.0"), model("a")))
    keys = [card.key for card in dashboard.cards_box.children]  # type: ignore[attr-defined]
    assert keys == [("b", "2.0"), ("a", "1.0")]
    assert dashboard.cards[("a", "1.0")] is first[("a", "1.0")]
    assert ("b", "1.0") not in dashboard.cards


def test_the_worker_count_field_keeps_a_user_edit_until_the_server_changes() -> None:
    dashboard = render_snapshot(snapshot(model()))
    card = card_of(dashboard)
    card.workers_input.value = 5
    dashboard.update(snapshot(model()))
    assert card.workers_input.value == 5
    dashboard.update(snapshot(model(min_workers=3, max_workers=3)))
    assert card.workers_input.value == 3


def test_scale_sends_the_typed_count_and_shows_the_answer() -> None:
    actions = FakeActions()
    dashboard = render_snapshot(snapshot(model()), actions=actions)
    card = card_of(dashboard)
    card.workers_input.value = 4
    card.scale_button.click()
    assert actions.calls == [("scale", "mnist", "1.0", "4")]
    assert dashboard.message.value == "scale mnist to 4: Processing worker updates..."


def test_a_refused_action_shows_the_servers_reason() -> None:
    error = ServeClientError(400, "BadRequestException", "max_worker cannot be < min_worker")
    dashboard = render_snapshot(snapshot(model()), actions=FakeActions(error))
    card_of(dashboard).scale_button.click()
    assert "scale mnist to 2 failed: 400 BadRequestException: max_worker cannot be &lt;" in (
        dashboard.message.value
    )


def test_without_a_server_actions_say_so() -> None:
    dashboard = render_snapshot(snapshot(model()))
    card_of(dashboard).scale_button.click()
    assert "no server to act on" in dashboard.message.value


@pytest.mark.parametrize("confirm", [True, False])
def test_unregister_asks_for_confirmation_first(confirm: bool) -> None:
    actions = FakeActions()
    dashboard = render_snapshot(snapshot(model()), actions=actions)
    card = card_of(dashboard)
    assert not card.confirming
    card.unregister_button.click()
    assert card.confirming
    assert "Unregister mnist version 1.0?" in card.confirm_label.value
    assert actions.calls == []
    (card.confirm_button if confirm else card.cancel_button).click()
    assert not card.confirming
    if confirm:
        assert actions.calls == [("unregister", "mnist", "1.0")]
        assert "Model &quot;mnist&quot; unregistered" in dashboard.message.value
    else:
        assert actions.calls == []


def test_close_closes_the_cards() -> None:
    dashboard = render_snapshot(snapshot(model()))
    card = card_of(dashboard)
    dashboard.close()
    assert card.comm is None
    assert dashboard.comm is None
