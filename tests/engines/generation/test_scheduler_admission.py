"""The scheduler's admission with a fake engine: places are taken before prepare, given back on every exit."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest

from engines.errors import InvalidArgumentError, ResourceExhaustedError
from engines.generation.scheduler import ContinuousBatchScheduler
from tests.engines.generation.test_engine_template import FakeEngine, request

MAX_SEQUENCES, MAX_WAITING = 2, 3
PLACES = MAX_SEQUENCES + MAX_WAITING


@pytest.fixture
def engine():
    engine = FakeEngine(reply="hi")
    engine.scheduler = ContinuousBatchScheduler(engine, max_sequences=MAX_SEQUENCES, max_waiting=MAX_WAITING)
    engine.prepared = []
    real_prepare = engine.prepare

    def counting_prepare(req):
        engine.prepared.append(req.request_id)
        return real_prepare(req)

    engine.prepare = counting_prepare
    yield engine
    engine.executor.shutdown(wait=False)


async def text_of(engine, req) -> str:
    async with contextlib.aclosing(engine.stream(req)) as deltas:
        return "".join([delta.text async for delta in deltas])


@contextlib.asynccontextmanager
async def device_held(engine):
    """Keep the engine's executor busy, so that no prepare runs until the block ends."""
    gate = threading.Event()
    blocker = asyncio.ensure_future(engine.executor.run(gate.wait, 10))
    try:
        yield
    finally:
        gate.set()
        await blocker


async def settle(tasks, done: int) -> None:
    for _ in range(500):
        if sum(task.done() for task in tasks) >= done:
            return
        await asyncio.sleep(0.01)


async def test_a_burst_admits_exactly_the_places_before_any_prepare(engine):
    burst = 50
    async with device_held(engine):
        tasks = [asyncio.ensure_future(text_of(engine, request(f"r{i}"))) for i in range(burst)]
        await settle(tasks, burst - PLACES)
        refused = [task for task in tasks if task.done()]
        assert len(refused) == burst - PLACES
        for task in refused:
            assert isinstance(task.exception(), ResourceExhaustedError)
            assert task.exception().reason == "OVERLOADED"
        assert engine.scheduler.admitted_count == PLACES
        assert engine.prepared == []  # nobody was tokenized while the device was held
    admitted = [task for task in tasks if task not in refused]
    assert await asyncio.gather(*admitted) == ["hi"] * PLACES
    assert len(engine.prepared) == PLACES
    assert engine.scheduler.admitted_count == 0


async def test_places_come_back_after_prepare_errors_cancellation_and_finish(engine):
    with pytest.raises(InvalidArgumentError):
        await text_of(engine, request("empty", prompt=""))
    assert engine.scheduler.admitted_count == 0

    async with device_held(engine):  # cancelled while waiting for prepare
        pending = asyncio.ensure_future(text_of(engine, request("cancelled")))
        await asyncio.sleep(0.05)
        assert engine.scheduler.admitted_count == 1
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
    assert engine.scheduler.admitted_count == 0

    async with contextlib.aclosing(engine.stream(request("left"))) as deltas:
        await anext(deltas)  # leaves after its first token
        assert engine.scheduler.admitted_count == 1
    assert engine.scheduler.admitted_count == 0

    assert await text_of(engine, request("done")) == "hi"
    # Every place is free again: a full set is admitted and served.
    full_set = await asyncio.gather(*(text_of(engine, request(f"n{i}")) for i in range(PLACES)))
    assert full_set == ["hi"] * PLACES
    assert engine.scheduler.admitted_count == 0
