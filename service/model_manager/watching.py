"""Watching a model: its record each time its status string changes, until it settles.

The progress and status streams of WatchModel read it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from engines.errors import RuntimeServiceError
from engines.reasons import Reason
from service.model_manager.managed import ManagedModel

# A watch reads the model's status this often (seconds), for at most this long.
WATCH_POLL_S = 0.1
WATCH_MAX_S = 3600.0


class WatchTooLongError(RuntimeServiceError, status="DEADLINE_EXCEEDED", reason=Reason.WATCH_TOO_LONG):
    """A watch that reached :data:`WATCH_MAX_S` before its model settled (DEADLINE_EXCEEDED; HTTP 504)."""


async def watch_status(
    managed: ManagedModel, loading: asyncio.Future[Any] | None = None
) -> AsyncIterator[ManagedModel]:
    """Yield ``managed`` now and again each time its status string changes, until it settles.

    Settled: READY, ERROR, or NOT_LOADED with no load starting (its lock free), and ``loading``
    (a load the caller started, if any) done. The status is read when it changes
    (``ManagedModel.changed``), when ``loading`` ends, and at least every :data:`WATCH_POLL_S`
    (a lock let go changes no field); the watch ends after :data:`WATCH_MAX_S` whatever the
    state, so no stream outlives its bound.
    """
    last = None
    deadline = time.monotonic() + WATCH_MAX_S
    while True:
        changed = managed.changed  # taken before the read: a change after it sets this one
        detail = managed.status_detail
        if detail != last:
            last = detail
            yield managed
        if ((loading is None or loading.done()) and managed.settled) or time.monotonic() >= deadline:
            return
        waiting = asyncio.ensure_future(changed.wait())
        wake = {waiting} if loading is None or loading.done() else {waiting, loading}
        try:
            await asyncio.wait(wake, timeout=WATCH_POLL_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
