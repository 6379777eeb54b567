"""How late the running event loop wakes up while some work runs (for servers in the test's process)."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

#: Longest the loop may be late while one request runs (the fuzz probe's bound, tests/fuzz/checks.py).
MAX_LAG_S = 0.5


async def lag_while(work: Awaitable[T]) -> tuple[T, float, float]:
    """Await ``work`` while a task sleeps 10 ms in a loop and records how late it wakes.

    The objects alive before ``work`` starts are frozen out of the garbage collector meanwhile, as
    the server freezes what its start-up made (``service.cli``): in a full test run the session's
    heap (every earlier test's models and servers) is far larger than a server's, and ``work``'s
    allocations could set off a full collection over all of it, which stops every thread, the
    loop's too, whichever thread allocated: a pause of the test process, not of the work measured.

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

    gc.collect()
    gc.freeze()
    task = asyncio.create_task(monitor())
    started = time.monotonic()
    try:
        result = await work
    finally:
        done.set()
        await task
        gc.unfreeze()
    return result, time.monotonic() - started, worst
