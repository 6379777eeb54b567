"""Helpers for tests that cancel generation streams and then look at what the server counted.

A cancelled sequence has no answer to read (its caller is gone): the tests observe it through
the metrics, ``ur_generation_sequences_finished_total{reason="cancelled"}`` and the tokens it
generated, ``ur_generation_cancelled_tokens_total``.
"""

from __future__ import annotations

import asyncio

from tests.scrape import Samples, moved, scrape

FINISHED = "ur_generation_sequences_finished_total"
#: Polls of the metrics (every 20 ms: up to 30 s, for the step in flight on a busy CPU).
POLLS, POLL_INTERVAL_S = 1500, 0.02


async def read_then_cancel(call, tokens: int) -> int:
    """Read a ``GenerateStream`` call until ``tokens`` token ids arrived, then cancel it.

    Returns the number of token ids received.
    """
    received = 0
    async for message in call:
        received += len(message.token_ids)
        if received >= tokens:
            break
    call.cancel()
    return received


class FinishedSequences:
    """Sequences of one model that left its batch since this was made, read from the metrics.

    Make it before the requests it is to see; the model's sequences that leave meanwhile for
    other reasons (other requests finishing) do not count as cancelled.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self.before = scrape()

    def count(self, reason: str) -> int:
        """Sequences that finished with ``reason`` (stop, length, tool_calls, cancelled) since."""
        return int(
            moved(
                self.before,
                scrape(),
                "ur_generation_sequences_finished_total",
                model=self.model,
                reason=reason,
            )
        )

    async def wait(self, reason: str, count: int, *, engine=None) -> Samples:
        """Wait for exactly ``count`` sequences finished with ``reason``; return the scrape that saw them.

        With ``engine``, also wait until its batch runs no sequence. Fails the test when they
        are not counted within :data:`POLLS` polls, or when more than ``count`` were.
        """
        for _ in range(POLLS):
            after = scrape()
            seen = moved(self.before, after, FINISHED, model=self.model, reason=reason)
            if seen >= count and (engine is None or engine.stats().generation.running == 0):
                assert seen == count, f"{seen} sequences of {self.model} finished {reason}, not {count}"
                return after
            await asyncio.sleep(POLL_INTERVAL_S)
        raise AssertionError(f"{count} sequences of {self.model} finished {reason} were never counted")

    async def cancelled(self, count: int, *, engine=None) -> int:
        """Wait for exactly ``count`` cancelled sequences (see :meth:`wait`); return the tokens they generated."""
        after = await self.wait("cancelled", count, engine=engine)
        return int(moved(self.before, after, "ur_generation_cancelled_tokens_total", model=self.model))
