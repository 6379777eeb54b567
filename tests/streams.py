"""Helpers for tests that cancel generation streams and then look at what the engine recorded."""

from __future__ import annotations

import asyncio

#: Polls of the engine's records (every 20 ms: up to 30 s, for the step in flight on a busy CPU).
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


async def finished_records(engine, request_ids: set[str], *, idle: bool = False) -> dict:
    """The engine's finished records of ``request_ids`` (by id), once all of them are there.

    With ``idle``, also wait until the engine's scheduler runs no sequence. Fails the test when
    they do not appear within :data:`POLLS` polls.
    """
    for _ in range(POLLS):
        records = {r.request_id: r for r in engine.finished if r.request_id in request_ids}
        if len(records) == len(request_ids) and (not idle or engine.scheduler.active_count == 0):
            return records
        await asyncio.sleep(POLL_INTERVAL_S)
    raise AssertionError(f"sequences never finished: {request_ids}")
