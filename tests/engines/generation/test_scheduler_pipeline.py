"""The scheduler queues the next step while one runs, so the model's lane never waits on the event loop."""

from __future__ import annotations

import contextlib
import threading

from engines.generation.scheduler import ContinuousBatchScheduler
from tests.engines.generation.test_engine_template import FakeEngine, request

#: How long a step waits for the next one to be queued before it reports that it was not.
QUEUED_WAIT_S = 2.0


class CountingEngine(FakeEngine):
    """A fake engine whose step, before returning, waits for the scheduler to queue the next one."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply=reply)
        self.submitted = 0
        self.next_was_queued: list[bool] = []
        self._changed = threading.Condition()
        real_run = self.executor.run

        async def counting_run(fn, *args, **kwargs):
            if fn == self.step:
                with self._changed:
                    self.submitted += 1
                    self._changed.notify_all()
            return await real_run(fn, *args, **kwargs)

        self.executor.run = counting_run

    def step(self, running, released):
        with self._changed:
            index = len(self.next_was_queued) + 1  # this step's number; the next is index + 1
            queued = self._changed.wait_for(lambda: self.submitted > index, QUEUED_WAIT_S)
            self.next_was_queued.append(queued)
        return super().step(running, released)


async def test_the_next_step_is_queued_before_the_running_one_returns():
    engine = CountingEngine(reply="hello")
    engine.scheduler = ContinuousBatchScheduler(engine, max_sequences=2, max_waiting=2)
    try:
        async with contextlib.aclosing(engine.stream(request("a"))) as deltas:
            text = "".join([delta.text async for delta in deltas])
        await engine.scheduler.drained()
    finally:
        engine.executor.shutdown(wait=False)
    assert text == "hello"
    # Five characters and the end token are six steps; every step that had a sequence running
    # after it found the next step queued (the last one frees the finished sequence only).
    steps = engine.next_was_queued
    assert len(steps) >= 6
    assert all(steps[:6]), steps


async def test_a_token_computed_after_a_sequence_finished_is_not_delivered():
    # "ab" then end: the step queued ahead still holds the finished sequence; the engine skips it.
    engine = FakeEngine(reply="ab")
    engine.scheduler = ContinuousBatchScheduler(engine, max_sequences=2, max_waiting=2)
    try:
        async with contextlib.aclosing(engine.stream(request("r", prompt="x"))) as deltas:
            collected = [delta async for delta in deltas]
        await engine.scheduler.drained()
    finally:
        engine.executor.shutdown(wait=False)
    assert "".join(d.text for d in collected) == "ab"
    assert collected[-1].finish_reason is not None
    assert sum(len(d.token_ids) for d in collected) == 2
    # "a", "b" and the end token, plus at most the one step queued before the end was seen.
    forwarded = [ids for kind, ids in engine.calls if kind == "forward"]
    assert forwarded.count(["r"]) in (3, 4)
    assert engine.calls[-1] == ("free", ["r"])
