"""Stored responses (the Responses API's ``store``): put, get and delete, off the event loop.

Each call is blocking store work (a listing, a few reads, writes and deletes, each bounded by the
state store's ``timeout_s``; see :mod:`engines.response_store`), so it runs on a worker lane of its
own, never on the event loop. Puts and reads get separate lanes: a put lists the store to keep it
within its bounds (tens of ms on S3 for thousands of responses), which must not hold up a
``GET /v1/responses/{id}`` queued behind it.

Every method acts for an owner, the name of the caller's API key (``""`` without keys): a
response is stored under its owner and read or deleted only by it (another key's id is
RESPONSE_NOT_FOUND, as an id never stored).
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.executor import DeviceExecutor
from engines.response_store import PutResult, ResponseStore, StoredResponse


@dataclass(frozen=True, slots=True)
class ResponseStoreTask:
    """Stored responses over a :class:`~engines.response_store.ResponseStore`.

    Attributes:
        store: where the responses are kept.
        writes: the lane puts run on.
        reads: the lane gets and deletes run on.

    """

    store: ResponseStore
    writes: DeviceExecutor
    reads: DeviceExecutor

    async def put(self, owner: str, response: StoredResponse) -> PutResult:
        """Store a new response of ``owner`` (see :meth:`ResponseStore.put` for its bounds and errors)."""
        return await self.writes.run(self.store.put, response, owner)

    async def get(self, owner: str, response_id: str) -> StoredResponse:
        """``owner``'s stored response ``response_id``.

        :meth:`ResponseStore.get`: NOT_FOUND when absent, another key's, or expired.
        """
        return await self.reads.run(self.store.get, response_id, owner)

    async def delete(self, owner: str, response_id: str) -> None:
        """Delete ``owner``'s stored response ``response_id``.

        :meth:`ResponseStore.delete`: NOT_FOUND when absent or another key's.
        """
        await self.reads.run(self.store.delete, response_id, owner)
