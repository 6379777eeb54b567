"""The dynamic batcher on its own: a real device executor, plain Python batch functions."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from engines.batching import BatchingConfig, DynamicBatcher
from engines.errors import InvalidArgumentError, ResourceExhaustedError, UnavailableError
from engines.executor import DeviceExecutor


@pytest.fixture
def executor():
    ex = DeviceExecutor("cpu-batcher-test")
    yield ex
    ex.shutdown()


def upper_batch(seen: list[list[str]]):
    def run(items: list[str]) -> list[str]:
        seen.append(list(items))
        return [item.upper() for item in items]

    return run


async def test_concurrent_callers_share_batches_and_get_their_own_results(executor):
    seen: list[list[str]] = []
    batcher = DynamicBatcher(upper_batch(seen), executor, BatchingConfig(max_wait_ms=50), name="t")
    words = [f"w{i}" for i in range(40)]
    results = await asyncio.gather(*(batcher.submit([w], [1]) for w in words))
    assert results == [[w.upper()] for w in words]
    sizes = [len(batch) for batch in seen]
    assert len(sizes) < len(words)
    assert sum(sizes) == len(words)
    assert max(sizes) > 1


async def test_batch_size_and_token_budget_are_respected(executor):
    seen: list[list[str]] = []
    config = BatchingConfig(max_batch_size=4, max_batch_tokens=30, max_wait_ms=30)
    batcher = DynamicBatcher(upper_batch(seen), executor, config, name="t")
    # Costs of 10 tokens: at most 3 per batch by the budget (3 * 10 <= 30 < 4 * 10).
    await asyncio.gather(*(batcher.submit([f"x{i}"], [10]) for i in range(9)))
    assert all(len(batch) <= 3 for batch in seen)
    # Costs of 1 token: the size limit (4) binds.
    seen.clear()
    await asyncio.gather(*(batcher.submit([f"y{i}"], [1]) for i in range(9)))
    assert all(len(batch) <= 4 for batch in seen)
    assert max(len(batch) for batch in seen) == 4


async def test_an_item_over_the_budget_still_runs_alone(executor):
    seen: list[list[str]] = []
    batcher = DynamicBatcher(upper_batch(seen), executor, BatchingConfig(max_batch_tokens=8), name="t")
    assert await batcher.submit(["long"], [100]) == ["LONG"]


async def test_batches_are_sorted_longest_first_and_results_routed_back(executor):
    seen: list[list[str]] = []
    batcher = DynamicBatcher(upper_batch(seen), executor, BatchingConfig(max_wait_ms=50), name="t")
    texts = ["a", "ccc", "bb", "dddd"]
    # Costs 5 to 8 tokens: one length group (see test_length_batches.py for several).
    results = await asyncio.gather(*(batcher.submit([t], [len(t) + 4]) for t in texts))
    assert results == [[t.upper()] for t in texts]
    assert seen[0] == sorted(texts, key=len, reverse=True)


async def test_a_failed_batch_fails_every_caller_and_the_batcher_recovers(executor):
    calls = 0

    def flaky(items: list[str]) -> list[str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("device fell over")
        return items

    batcher = DynamicBatcher(flaky, executor, BatchingConfig(max_wait_ms=50), name="t")
    results = await asyncio.gather(*(batcher.submit([str(i)], [1]) for i in range(5)), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert calls == 1, "the five items ran as one batch, which failed"
    assert await batcher.submit(["ok"], [1]) == ["ok"]


async def test_an_item_error_fails_only_its_caller(executor):
    def run(items: list[str]) -> list[object]:
        return [InvalidArgumentError("bad") if item == "bad" else item for item in items]

    batcher = DynamicBatcher(run, executor, BatchingConfig(max_wait_ms=50), name="t")
    good, bad = await asyncio.gather(
        batcher.submit(["good"], [1]), batcher.submit(["bad"], [1]), return_exceptions=True
    )
    assert good == ["good"]
    assert isinstance(bad, InvalidArgumentError)


async def test_a_full_queue_refuses_with_overloaded(executor):
    release = threading.Event()

    def slow(items: list[str]) -> list[str]:
        release.wait(5)
        return items

    batcher = DynamicBatcher(
        slow, executor, BatchingConfig(max_queue=2, max_batch_size=1, max_wait_ms=0), name="t"
    )
    first = asyncio.ensure_future(batcher.submit(["running"], [1]))
    await asyncio.sleep(0.05)  # now running, the queue is empty again
    queued = [asyncio.ensure_future(batcher.submit([f"q{i}"], [1])) for i in range(2)]
    await asyncio.sleep(0.01)
    with pytest.raises(ResourceExhaustedError) as caught:
        await batcher.submit(["one too many"], [1])
    assert caught.value.reason == "OVERLOADED"
    release.set()
    assert await first == ["running"]
    assert [await q for q in queued] == [["q0"], ["q1"]]  # the refusal took no place


async def test_a_cancelled_callers_items_are_dropped_before_running(executor):
    release = threading.Event()
    seen: list[list[str]] = []

    def run(items: list[str]) -> list[str]:
        release.wait(5)
        seen.append(list(items))
        return items

    batcher = DynamicBatcher(run, executor, BatchingConfig(max_batch_size=1, max_wait_ms=0), name="t")
    first = asyncio.ensure_future(batcher.submit(["first"], [1]))
    await asyncio.sleep(0.05)
    doomed = asyncio.ensure_future(batcher.submit(["doomed", "doomed2"], [1, 1]))
    await asyncio.sleep(0.01)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed  # the cancellation is through before the lane takes the next batch
    release.set()
    assert await first == ["first"]
    assert await batcher.submit(["after"], [1]) == ["after"]
    assert seen == [["first"], ["after"]]  # both cancelled items were dropped before running


async def test_close_fails_waiting_callers_and_refuses_new_ones(executor):
    release = threading.Event()

    def run(items: list[str]) -> list[str]:
        release.wait(5)
        return items

    batcher = DynamicBatcher(run, executor, BatchingConfig(max_batch_size=1, max_wait_ms=0), name="t")
    running = asyncio.ensure_future(batcher.submit(["running"], [1]))
    await asyncio.sleep(0.05)
    waiting = asyncio.ensure_future(batcher.submit(["waiting"], [1]))
    await asyncio.sleep(0.01)
    await asyncio.to_thread(batcher.close)  # engines close from their worker thread
    await asyncio.sleep(0.01)
    release.set()
    with pytest.raises(UnavailableError):
        await waiting
    with pytest.raises(UnavailableError):
        await running
    with pytest.raises(UnavailableError):
        await batcher.submit(["late"], [1])


async def test_reserved_places_count_against_the_queue_until_their_items_are_queued(executor):
    seen: list[list[str]] = []
    batcher = DynamicBatcher(upper_batch(seen), executor, BatchingConfig(max_queue=4), name="t")
    with batcher.reserve(10) as oversized:  # an empty queue takes a request larger than itself
        assert await batcher.submit(["a"] * 10, [1] * 10, places=oversized) == ["A"] * 10
    first = batcher.reserve(3)
    with pytest.raises(ResourceExhaustedError) as caught:
        batcher.reserve(2)
    assert caught.value.reason == "OVERLOADED"
    # The last place is held; leaving the block without submitting (a tokenization error, a
    # cancellation) gives it back.
    with batcher.reserve(1), pytest.raises(ResourceExhaustedError):
        await batcher.submit(["no room"], [1])
    assert await batcher.submit(["room again"], [1]) == ["ROOM AGAIN"]
    with first:
        assert await batcher.submit(["x", "y", "z"], [1, 1, 1], places=first) == ["X", "Y", "Z"]
        assert first.count == 0  # handed back when its items were queued
    with batcher.reserve(4), batcher.reserve(0):  # all four places are free; none asked, none refused
        pass
    batcher.close()
    with pytest.raises(UnavailableError):
        batcher.reserve(1)


async def test_a_burst_is_refused_before_its_inputs_are_prepared(executor):
    # The engines' pattern: reserve, tokenize in a worker thread, submit with the places.
    seen: list[list[str]] = []
    batcher = DynamicBatcher(upper_batch(seen), executor, BatchingConfig(max_queue=8), name="t")
    gate, prepared = threading.Event(), []

    def prepare(text: str) -> str:
        prepared.append(text)
        gate.wait(10)
        return text

    async def embed(text: str) -> list[str]:
        with batcher.reserve(1) as places:
            item = await asyncio.to_thread(prepare, text)
            return await batcher.submit([item], [1], places=places)

    calls = [asyncio.ensure_future(embed(f"t{i}")) for i in range(50)]
    for _ in range(500):  # refusals come back at once, while the admitted wait at the gate
        if sum(call.done() for call in calls) >= 42:
            break
        await asyncio.sleep(0.01)
    refused = [call for call in calls if call.done()]
    assert len(refused) == 42
    assert all(isinstance(call.exception(), ResourceExhaustedError) for call in refused)
    assert len(prepared) <= 8
    gate.set()
    served = await asyncio.gather(*(call for call in calls if call not in refused))
    assert len(served) == 8 and len(prepared) == 8


async def test_an_item_that_waited_past_max_queue_wait_fails_instead_of_answering_late(executor):
    """QUEUE_WAIT_EXCEEDED when its batch would start, while the batch ahead of it still runs."""
    gate = threading.Event()

    def slow(items: list[str]) -> list[str]:
        gate.wait(timeout=10)
        return list(items)

    batcher = DynamicBatcher(slow, executor, BatchingConfig(max_queue_wait_s=0.2), name="t")
    first = asyncio.create_task(batcher.submit(["first"], [1]))
    await asyncio.sleep(0.05)  # the first batch is running (held by the gate)
    second = asyncio.create_task(batcher.submit(["second"], [1]))
    await asyncio.sleep(0.4)  # the second item has waited past the limit
    gate.set()
    assert await first == ["first"]
    with pytest.raises(ResourceExhaustedError) as caught:
        await second
    assert caught.value.reason == "QUEUE_WAIT_EXCEEDED"
    assert caught.value.metadata["max_queue_wait_s"] == "0.2"
    assert await batcher.submit(["third"], [1]) == ["third"], "a fresh item still runs"


async def test_the_next_batch_waits_on_the_lane_and_takes_what_is_queued_when_it_starts(executor):
    """The lane goes from one batch into the next without the event loop (JOBS_ON_LANE)."""
    gate = threading.Event()
    started: list[tuple[list[str], float]] = []

    def run(items: list[str]) -> list[str]:
        started.append((list(items), time.monotonic()))
        gate.wait(timeout=10)
        return items

    batcher = DynamicBatcher(run, executor, BatchingConfig(), name="t")
    first = asyncio.ensure_future(batcher.submit(["first"], [1]))
    await asyncio.sleep(0.05)  # running, held by the gate
    second = asyncio.ensure_future(batcher.submit(["second"], [1]))
    await asyncio.sleep(0.05)  # its job now waits on the lane
    third = asyncio.ensure_future(batcher.submit(["third"], [1]))
    await asyncio.sleep(0.05)
    gate.set()
    time.sleep(0.3)  # noqa: ASYNC251 - held on purpose: only a job already on the lane can start now
    loop_free = time.monotonic()
    assert await asyncio.gather(first, second, third) == [["first"], ["second"], ["third"]]
    assert [items for items, _ in started] == [["first"], ["second", "third"]]
    assert started[1][1] < loop_free, "the second batch started while the event loop was held"


async def test_a_lone_request_costs_one_lane_job(executor, monkeypatch):
    jobs = 0
    real_run = executor.run

    async def counting_run(fn, *args, **kwargs):
        nonlocal jobs
        jobs += 1
        return await real_run(fn, *args, **kwargs)

    monkeypatch.setattr(executor, "run", counting_run)
    batcher = DynamicBatcher(upper_batch([]), executor, BatchingConfig(), name="t")
    for word in ("one", "two", "three"):
        assert await batcher.submit([word], [1]) == [word.upper()]
        await asyncio.sleep(0.05)  # idle between requests
    assert jobs == 3
