"""Tests for server/batching.py: batch formation, policies, expiry, queue limits, close."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from jupyter_serve.server.batching import Batcher, BatcherClosed, Pending, no_worker_message
from jupyter_serve.wire.errors import RequestTimeout, ServeError, ServiceUnavailable
from jupyter_serve.wire.protocol import InferenceRequest, InferenceResult

T = TypeVar("T")
HANG_GUARD = 10.0  # seconds; only stops a broken batcher from hanging the suite


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, HANG_GUARD))


def req(rid: str) -> InferenceRequest:
    return InferenceRequest(request_id=rid)


def ids(batch: list[Pending]) -> list[str]:
    return [item.request.request_id for item in batch]


def later() -> float:
    return asyncio.get_running_loop().time() + 60.0


def submit_soon(batcher: Batcher, *rids: str) -> None:
    """Queue requests after every task already scheduled has taken its next step."""
    loop = asyncio.get_running_loop()
    for rid in rids:
        loop.call_soon(batcher.submit, req(rid), later())


def test_eager_takes_everything_queued_up_to_batch_size() -> None:
    async def main() -> tuple[list[str], list[str]]:
        batcher = Batcher("m", batch_size=2, max_batch_delay=30.0)
        for rid in "abc":
            batcher.submit(req(rid), later())
        return ids(await batcher.next_batch()), ids(await batcher.next_batch())

    assert run(main()) == (["a", "b"], ["c"])


def test_eager_dispatches_a_lone_request_without_waiting_the_delay() -> None:
    async def main() -> list[str]:
        batcher = Batcher("m", batch_size=8, max_batch_delay=30.0)
        consumer = asyncio.ensure_future(batcher.next_batch())
        submit_soon(batcher, "a")
        return ids(await consumer)

    # Waiting for the 30 s delay would trip the hang guard.
    assert run(main()) == ["a"]


def test_strict_waits_for_more_and_dispatches_a_full_batch_at_once() -> None:
    async def main() -> list[str]:
        batcher = Batcher("m", batch_size=3, max_batch_delay=30.0, strict=True)
        batcher.submit(req("a"), later())
        consumer = asyncio.ensure_future(batcher.next_batch())
        submit_soon(batcher, "b", "c", "d")
        return ids(await consumer)

    # The 30 s delay would trip the hang guard: the full batch left without waiting for it.
    assert run(main()) == ["a", "b", "c"]


def test_eager_with_the_same_arrivals_sends_the_first_alone() -> None:
    async def main() -> list[str]:
        batcher = Batcher("m", batch_size=3, max_batch_delay=30.0, strict=False)
        consumer = asyncio.ensure_future(batcher.next_batch())
        submit_soon(batcher, "a")
        await asyncio.sleep(0)
        submit_soon(batcher, "b", "c")
        return ids(await consumer)

    assert run(main()) == ["a"]


def test_strict_partial_batch_leaves_after_the_delay_from_the_first_arrival() -> None:
    async def main() -> tuple[list[str], float, float]:
        loop = asyncio.get_running_loop()
        batcher = Batcher("m", batch_size=4, max_batch_delay=0.05, strict=True)
        future = batcher.submit(req("a"), later())
        batch = await batcher.next_batch()
        assert batch[0].future is future
        return ids(batch), loop.time(), batch[0].arrival

    batch, returned_at, arrival = run(main())
    assert batch == ["a"]
    assert returned_at >= arrival + 0.05


def test_strict_delay_counts_from_the_first_arrival_not_from_the_call() -> None:
    async def main() -> list[str]:
        batcher = Batcher("m", batch_size=4, max_batch_delay=0.02, strict=True)
        batcher.submit(req("a"), later())
        await asyncio.sleep(0.02)  # the first item's window passes while no worker asks
        consumer = asyncio.ensure_future(batcher.next_batch())
        submit_soon(batcher, "b")
        return ids(await consumer)

    assert run(main()) == ["a"]


def test_expired_requests_get_a_timeout_and_are_not_dispatched() -> None:
    async def main() -> tuple[list[str], BaseException | None]:
        loop = asyncio.get_running_loop()
        batcher = Batcher("m", batch_size=4)
        expired = batcher.submit(req("old"), loop.time() - 1.0)
        batcher.submit(req("new"), later())
        batch = await batcher.next_batch()
        return ids(batch), expired.exception()

    batch, error = run(main())
    assert batch == ["new"]
    assert isinstance(error, RequestTimeout)
    assert error.status_code == 408
    assert "old" in error.message


def test_a_request_no_worker_takes_gets_its_timeout_at_its_deadline() -> None:
    """No worker ever asks (none loads): the queue still answers at the deadline, and
    the next request is watched in turn."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        batcher = Batcher("m", batch_size=4)
        first = batcher.submit(req("first"), loop.time() + 0.02)
        second = batcher.submit(req("second"), loop.time() + 0.05)
        kept = batcher.submit(req("kept"), later())
        errors = []
        for future in (first, second):
            with pytest.raises(RequestTimeout) as timed_out:
                await future
            errors.append(timed_out.value.message)
        assert not kept.done()
        batcher.fail_queued(ServeError("Worker died.", status_code=500))
        with pytest.raises(ServeError, match=r"^Worker died\.$"):
            await kept
        return errors

    first, second = run(main())
    assert "Request first" in first
    assert "Request second" in second


def test_cancelled_requests_are_dropped() -> None:
    async def main() -> tuple[list[str], int]:
        batcher = Batcher("m", batch_size=4)
        batcher.submit(req("gone"), later()).cancel()
        batcher.submit(req("here"), later())
        count = batcher.pending_count
        return ids(await batcher.next_batch()), count

    assert run(main()) == (["here"], 1)


def test_a_cancelled_head_does_not_wake_a_waiting_worker_with_an_empty_batch() -> None:
    async def main() -> list[str]:
        batcher = Batcher("m", batch_size=4)
        consumer = asyncio.ensure_future(batcher.next_batch())
        loop = asyncio.get_running_loop()
        loop.call_soon(lambda: batcher.submit(req("gone"), later()).cancel())
        await asyncio.sleep(0)
        submit_soon(batcher, "here")
        return ids(await consumer)

    assert run(main()) == ["here"]


def test_a_full_queue_refuses_with_torchserves_503() -> None:
    async def main() -> None:
        batcher = Batcher("mnist", job_queue_size=2)
        first = batcher.submit(req("a"), later())
        batcher.submit(req("b"), later())
        with pytest.raises(ServiceUnavailable) as info:
            batcher.submit(req("c"), later())
        assert info.value.status_code == 503
        assert info.value.message == no_worker_message("mnist")
        first.cancel()  # a client leaving frees its place
        batcher.submit(req("c"), later())
        assert batcher.pending_count == 2
        assert batcher.remaining_capacity == 0

    run(main())


SEQUENCE_NOTE = (
    " If this is a sequence inference, please check if it is closed, or expired; "
    "or exceeds maxSequenceJobQueueSize"
)


def test_no_worker_message_matches_torchserve() -> None:
    """The texts TorchServe 0.12 answers (read from a running TorchServe 0.12)."""
    assert no_worker_message("mnist") == (
        'Model "mnist" has no worker to serve inference request. '
        "Please use scale workers API to add workers." + SEQUENCE_NOTE
    )
    assert no_worker_message("m", "1.0") == (
        'Model "m" Version 1.0" has no worker to serve inference request. '
        "Please use scale workers API to add workers." + SEQUENCE_NOTE
    )
    assert no_worker_message("m", "1.0", job="describe") == (
        'Model "m" has no worker to serve describe request. '
        "Please use scale workers API to add workers."
    )


def test_describe_jobs_travel_alone() -> None:
    async def main() -> list[list[str]]:
        batcher = Batcher("m", batch_size=8)
        batcher.submit(req("p1"), later())
        batcher.submit(req("d"), later(), command="describe")
        batcher.submit(req("p2"), later())
        batcher.submit(req("p3"), later())
        return [ids(await batcher.next_batch()) for _ in range(3)]

    assert run(main()) == [["p1"], ["d"], ["p2", "p3"]]


def test_strict_does_not_hold_a_describe_job_for_the_delay() -> None:
    async def main() -> list[Pending]:
        batcher = Batcher("m", batch_size=8, max_batch_delay=30.0, strict=True)
        batcher.submit(req("d"), later(), command="describe")
        return await batcher.next_batch()

    batch = run(main())
    assert [(p.request.request_id, p.command) for p in batch] == [("d", "describe")]


def test_requeue_puts_a_batch_back_at_the_head_in_order() -> None:
    async def main() -> list[str]:
        batcher = Batcher("m", batch_size=2)
        for rid in "abc":
            batcher.submit(req(rid), later())
        batch = await batcher.next_batch()
        batcher.requeue(batch)
        return ids(await batcher.next_batch())

    assert run(main()) == ["a", "b"]


def test_close_fails_queued_requests_and_stops_waiting_workers() -> None:
    async def main() -> None:
        batcher = Batcher("m")
        queued = [batcher.submit(req(rid), later()) for rid in "ab"]
        batcher.close(ServiceUnavailable("Model m is gone"))
        errors = [f.exception() for f in queued]
        assert all(isinstance(e, ServiceUnavailable) for e in errors)
        assert errors[0] is not errors[1]  # one exception object per client
        with pytest.raises(BatcherClosed):
            await batcher.next_batch()
        with pytest.raises(ServiceUnavailable, match="is gone"):
            batcher.submit(req("c"), later())

    run(main())


def test_close_wakes_a_worker_waiting_for_the_first_item() -> None:
    async def main() -> None:
        batcher = Batcher("m")
        consumer = asyncio.ensure_future(batcher.next_batch())
        asyncio.get_running_loop().call_soon(batcher.close, ServiceUnavailable("closed"))
        with pytest.raises(BatcherClosed):
            await consumer

    run(main())


def test_requeue_after_close_fails_the_batch() -> None:
    async def main() -> BaseException | None:
        batcher = Batcher("m")
        future = batcher.submit(req("a"), later())
        batch = await batcher.next_batch()
        batcher.close(ServiceUnavailable("closed"))
        batcher.requeue(batch)
        return future.exception()

    assert isinstance(run(main()), ServiceUnavailable)


def test_concurrent_workers_share_the_queue_without_losing_or_repeating_items() -> None:
    async def drain(batcher: Batcher, seen: list[list[str]], stop: asyncio.Event) -> None:
        while not stop.is_set():
            batch = await batcher.next_batch()
            seen.append(ids(batch))
            for item in batch:
                item.future.set_result(InferenceResult(item.request.request_id))

    async def main() -> list[list[str]]:
        batcher = Batcher("m", batch_size=2)
        seen: list[list[str]] = []
        stop = asyncio.Event()
        workers = [asyncio.ensure_future(drain(batcher, seen, stop)) for _ in range(2)]
        futures = [batcher.submit(req(str(i)), later()) for i in range(7)]
        await asyncio.gather(*futures)
        stop.set()
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        return seen

    seen = run(main())
    flat = [rid for batch in seen for rid in batch]
    assert sorted(flat, key=int) == [str(i) for i in range(7)]
    assert all(1 <= len(batch) <= 2 for batch in seen)


def test_cancelling_a_waiting_worker_loses_no_item() -> None:
    async def main() -> list[str]:
        batcher = Batcher("m", batch_size=4, max_batch_delay=30.0, strict=True)
        batcher.submit(req("a"), later())
        waiting = asyncio.ensure_future(batcher.next_batch())
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        batcher.strict = False
        return ids(await batcher.next_batch())

    assert run(main()) == ["a"]


def test_take_ready_hands_out_what_next_batch_would_return_at_once() -> None:
    async def main() -> list[Any]:
        eager = Batcher("m", batch_size=2, max_batch_delay=30.0)
        strict = Batcher("m", batch_size=2, max_batch_delay=30.0, strict=True)
        seen: list[Any] = [eager.take_ready()]  # nothing queued
        for rid in "abc":
            eager.submit(req(rid), later())
        seen += [ids(eager.take_ready() or []), ids(eager.take_ready() or [])]
        strict.submit(req("x"), later())
        seen.append(strict.take_ready())  # short of a batch, within the delay: wait
        strict.submit(req("y"), later())
        seen.append(ids(strict.take_ready() or []))  # a full batch: at once
        return seen

    assert run(main()) == [None, ["a", "b"], ["c"], None, ["x", "y"]]


def test_take_ready_lets_a_strict_partial_batch_go_once_its_delay_passed() -> None:
    async def main() -> tuple[Any, list[str]]:
        batcher = Batcher("m", batch_size=4, max_batch_delay=0.02, strict=True)
        batcher.submit(req("a"), later())
        early = batcher.take_ready()
        await asyncio.sleep(0.03)
        return early, ids(batcher.take_ready() or [])

    assert run(main()) == (None, ["a"])


def test_take_ready_after_close_leaves_the_error_to_next_batch() -> None:
    async def main() -> Any:
        batcher = Batcher("m", batch_size=2, max_batch_delay=0.0)
        batcher.close(ServiceUnavailable("gone"))
        ready = batcher.take_ready()
        with pytest.raises(BatcherClosed):
            await batcher.next_batch()
        return ready

    assert run(main()) is None
