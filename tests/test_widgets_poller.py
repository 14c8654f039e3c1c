"""Poller on a real asyncio loop with a fake fetch: updates, errors, recovery, stop on close.

Synchronisation is by events only: the interval is an hour, so every further
round is driven by `poke()`, and each test awaits the callback it expects.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from jupyter_serve.kernel.client import ServeClient, ServerInfo
from jupyter_serve.kernel.widgets.dashboard import ModelDashboard
from jupyter_serve.kernel.widgets.poller import Poller
from jupyter_serve.kernel.widgets.snapshot import DashboardSnapshot, ModelView

HOUR = 3600.0
WAIT = 5.0  # a guard against hanging, never a timing assertion


class Script:
    """A fetch that returns or raises its scripted outcomes in turn, from a worker thread."""

    def __init__(self, *outcomes: object) -> None:
        self.outcomes = list(outcomes)
        self.threads: list[int] = []

    def __call__(self) -> object:
        self.threads.append(threading.get_ident())
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


class Seen:
    """Callbacks that record what they got and let a test await the n-th call."""

    def __init__(self) -> None:
        self.values: list[object] = []
        self.changed = asyncio.Event()

    def __call__(self, value: object) -> None:
        self.values.append(value)
        self.changed.set()

    async def count(self, n: int) -> None:
        while len(self.values) < n:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), WAIT)


def test_results_arrive_on_the_loop_thread_and_poke_fetches_again() -> None:
    async def main() -> None:
        fetch, results, errors = Script(1, 2), Seen(), Seen()
        poller: Poller[object] = Poller(fetch, results, errors, interval=HOUR)
        poller.start()
        await results.count(1)
        poller.poke()
        await results.count(2)
        assert results.values == [1, 2]
        assert errors.values == []
        assert threading.get_ident() not in fetch.threads  # fetched off the loop thread
        poller.stop()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(poller.task, WAIT)  # type: ignore[arg-type]
        assert not poller.running

    asyncio.run(main())


def test_an_error_is_reported_and_polling_recovers() -> None:
    async def main() -> None:
        failure = ConnectionRefusedError(111, "Connection refused")
        fetch, results, errors = Script(failure, "back"), Seen(), Seen()
        poller: Poller[object] = Poller(fetch, results, errors, interval=HOUR)
        poller.start()
        await errors.count(1)
        assert errors.values == [failure]
        assert poller.running
        poller.poke()
        await results.count(1)
        assert results.values == ["back"]
        poller.stop()

    asyncio.run(main())


def test_a_failing_callback_does_not_end_polling() -> None:
    async def main() -> None:
        seen = Seen()

        def broken(value: object) -> None:
            seen(value)
            raise ValueError("bad render")

        poller: Poller[object] = Poller(Script(1, 2), broken, Seen(), interval=HOUR)
        poller.start()
        await seen.count(1)
        poller.poke()
        await seen.count(2)
        assert poller.running
        poller.stop()

    asyncio.run(main())


def test_a_slow_fetch_does_not_block_the_loop() -> None:
    async def main() -> None:
        release = threading.Event()
        entered = asyncio.Event()
        loop = asyncio.get_running_loop()

        def slow() -> str:
            loop.call_soon_threadsafe(entered.set)
            release.wait(WAIT)
            return "done"

        results = Seen()
        poller: Poller[object] = Poller(slow, results, Seen(), interval=HOUR)
        poller.start()
        await asyncio.wait_for(entered.wait(), WAIT)
        assert results.values == []  # the loop runs this coroutine while the fetch waits
        release.set()
        await results.count(1)
        poller.stop()

    asyncio.run(main())


def test_start_twice_keeps_one_task() -> None:
    async def main() -> None:
        poller: Poller[object] = Poller(Script(1), Seen(), Seen(), interval=HOUR)
        assert poller.start() is poller.start()
        poller.stop()

    asyncio.run(main())


def test_the_dashboard_polls_shows_unreachable_recovers_and_stops_when_closed() -> None:
    good = DashboardSnapshot(1.0, (ModelView("mnist", "1.0", "Healthy"),))
    later = DashboardSnapshot(2.0, (ModelView("mnist", "1.0", "Healthy"),), responses={"2XX": 1})
    script = Script(good, OSError("Connection refused"), later)
    given: list[DashboardSnapshot | None] = []

    def fetch(previous: DashboardSnapshot | None) -> DashboardSnapshot:
        given.append(previous)
        return script()  # type: ignore[return-value]

    async def main() -> None:
        dashboard = ModelDashboard(fetch=fetch, interval=HOUR, start=False)
        banners = Seen()
        dashboard.banner.observe(lambda change: banners(change["new"]), "value")
        assert dashboard.poller is not None
        task = dashboard.poller.start()
        await banners.count(1)
        assert "1 model version" in dashboard.banner.value
        dashboard.poller.poke()
        await banners.count(2)
        assert "server unreachable:</b> Connection refused" in dashboard.banner.value
        assert len(dashboard.cards_box.children) == 1  # the last figures stay
        dashboard.poller.poke()
        await banners.count(3)
        assert "unreachable" not in dashboard.banner.value
        assert given == [None, good, good]  # trends continue from the last good snapshot
        dashboard.close()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, WAIT)
        assert not dashboard.poller.running

    asyncio.run(main())


def test_a_dashboard_with_a_client_starts_polling_on_the_running_loop() -> None:
    async def main() -> None:
        dashboard = ModelDashboard(ServeClient(ServerInfo("http://127.0.0.1:9/")), interval=HOUR)
        assert dashboard.poller is not None
        assert dashboard.poller.running
        dashboard.close()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(dashboard.poller.task, WAIT)  # type: ignore[arg-type]

    asyncio.run(main())
