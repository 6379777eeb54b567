"""How late the running event loop wakes up while some work runs (for servers in the test's process)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

#: Longest the loop may be late while one request runs (the fuzz probe's bound, tests/fuzz/checks.py).
MAX_LAG_S = 0.5


async def lag_while(work: Awaitable[T]) -> tuple[T, float, float]:
    """Await ``work`` while a task sleeps 10 ms in a loop and records how late it wakes.

    Returns:
        ``work``'s result, the seconds it took, and the longest lateness in seconds (the longest
        time the loop was held by anything while ``work`` ran).

    Raises:
        Whatever ``work`` raises (after the monitor has stopped).

    """
    worst = 0.0
    done = asyncio.Event()

    async def monitor() -> None:
        nonlocal worst
        while not done.is_set():
            before = time.monotonic()
            await asyncio.sleep(0.01)
            worst = max(worst, time.monotonic() - before - 0.01)

    task = asyncio.create_task(monitor())
    started = time.monotonic()
    try:
        result = await work
    finally:
        done.set()
        await task
    return result, time.monotonic() - started, worst
