"""Length-aware batching: the batcher groups queued inputs by token length.

The batcher on its own, with a real device executor and plain Python batch functions that record
each batch's costs: batches keep to the length ratio and to their token and count bounds, pad less
than one batch of everything queued, and a long input is not held back by a flood of short ones.
"""

from __future__ import annotations

import asyncio
import random
import threading

import pytest

from engines.batching import BatchingConfig, DynamicBatcher
from engines.batching.batcher import LENGTH_RATIO
from engines.batching.tokens import padded_tokens
from engines.executor import DeviceExecutor


@pytest.fixture
def executor():
    ex = DeviceExecutor("cpu-length-batches")
    yield ex
    ex.shutdown()


class Recorder:
    """A batch function whose items are ``(name, cost)``; it records each batch and can hold the lane."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, int]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def __call__(self, items: list[tuple[str, int]]) -> list[str]:
        self.started.set()
        self.gate.wait(10)
        self.batches.append(list(items))
        return [name for name, _ in items]


async def hold_the_lane(batcher: DynamicBatcher, recorder: Recorder) -> asyncio.Future:
    """Submit one item that runs until ``recorder.gate`` is set, so that what follows queues up."""
    recorder.gate.clear()
    running = asyncio.ensure_future(batcher.submit([("blocker", 1)], [1]))
    await asyncio.to_thread(recorder.started.wait, 10)  # the lane runs it now
    return running


async def submit_all(batcher: DynamicBatcher, costs: list[int], prefix: str = "x") -> list[asyncio.Future]:
    futures = [
        asyncio.ensure_future(batcher.submit([(f"{prefix}{i}", cost)], [cost]))
        for i, cost in enumerate(costs)
    ]
    await asyncio.sleep(0)  # each submit runs up to its wait: all are queued now
    return futures


@pytest.mark.parametrize("seed", range(4))
async def test_mixed_lengths_run_in_length_groups_within_their_bounds(executor, seed):
    rng = random.Random(seed)
    config = BatchingConfig(max_batch_size=16, max_batch_tokens=rng.choice([512, 1024, 4096]))
    recorder = Recorder()
    batcher = DynamicBatcher(recorder, executor, config, name="t")
    blocker = await hold_the_lane(batcher, recorder)
    costs = [rng.randint(1, 256) for _ in range(64)]
    futures = await submit_all(batcher, costs)
    recorder.gate.set()
    assert [await f for f in futures] == [[f"x{i}"] for i in range(64)]  # each caller got its own
    await blocker
    batches = [[cost for _, cost in batch] for batch in recorder.batches[1:]]
    assert sorted(cost for batch in batches for cost in batch) == sorted(costs)
    for batch in batches:
        assert len(batch) <= config.max_batch_size
        assert len(batch) == 1 or padded_tokens(batch) <= config.max_batch_tokens, batch
        assert min(batch) >= LENGTH_RATIO * max(batch), batch
        assert batch == sorted(batch, reverse=True)
    # Padding: far less than running what was queued in batches of arrival order.
    grouped = sum(padded_tokens(batch) for batch in batches)
    arrival = sum(padded_tokens(costs[i : i + 16]) for i in range(0, 64, 16))
    assert grouped - sum(costs) < (arrival - sum(costs)) / 2, (grouped, arrival, sum(costs))


async def test_equal_lengths_still_fill_whole_batches(executor):
    recorder = Recorder()
    batcher = DynamicBatcher(recorder, executor, BatchingConfig(max_batch_size=8), name="t")
    blocker = await hold_the_lane(batcher, recorder)
    futures = await submit_all(batcher, [20 + i % 5 for i in range(32)])  # 20-24 tokens: one group
    recorder.gate.set()
    await asyncio.gather(*futures, blocker)
    assert [len(batch) for batch in recorder.batches[1:]] == [8, 8, 8, 8]


async def test_an_input_over_the_token_bound_runs_alone(executor):
    recorder = Recorder()
    batcher = DynamicBatcher(recorder, executor, BatchingConfig(max_batch_tokens=100), name="t")
    blocker = await hold_the_lane(batcher, recorder)
    futures = await submit_all(batcher, [300, 200, 160, 150])
    recorder.gate.set()
    await asyncio.gather(*futures, blocker)
    assert [[cost for _, cost in batch] for batch in recorder.batches[1:]] == [[300], [200], [160], [150]]


@pytest.mark.parametrize("max_wait_ms", [0, 20])
async def test_a_long_input_is_not_held_back_by_a_flood_of_short_ones(executor, max_wait_ms):
    """Older short inputs, then a long one, then a flood of short ones, arriving while batches run.

    The long input waits only behind the inputs older than it (one batch here): it runs in the
    second batch after the lane frees, although the flood alone fills 20 batches.
    """
    recorder = Recorder()
    config = BatchingConfig(max_batch_size=16, max_wait_ms=max_wait_ms)
    batcher = DynamicBatcher(recorder, executor, config, name="t")
    blocker = await hold_the_lane(batcher, recorder)
    older = await submit_all(batcher, [8] * 10, prefix="old")
    long = await submit_all(batcher, [250], prefix="long")
    flood = await submit_all(batcher, [6, 7, 8, 9] * 80, prefix="flood")
    more: list[asyncio.Future] = []
    loop = asyncio.get_running_loop()
    run = recorder.__call__

    def and_more(items):  # every batch brings 16 more short inputs while it runs, 10 times (bounded)
        if len(recorder.batches) <= 10:
            loop.call_soon_threadsafe(lambda: more.extend(submit_now(16)))
        return run(items)

    def submit_now(count: int) -> list[asyncio.Future]:
        return [asyncio.ensure_future(batcher.submit([("late", 7)], [7])) for _ in range(count)]

    batcher._run_batch = and_more
    recorder.gate.set()
    await asyncio.gather(*older, *long, *flood, blocker)
    await asyncio.gather(*more)
    names = [[name for name, _ in batch] for batch in recorder.batches]
    at = next(i for i, batch in enumerate(names) if "long0" in batch)
    assert at == 2, names[:4]  # the blocker, the older inputs' batch, then the long one
    assert names[at] == ["long0"]  # alone: no short input padded to its length
    assert all(name.startswith(("old", "flood")) for name in names[1]), names[1]
    assert len(names) > 20
