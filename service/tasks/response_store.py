"""Stored responses (the Responses API's ``store``): put, get and delete, off the event loop.

Each call is blocking store work (a listing, a few reads, writes and deletes, each bounded by the
state store's ``timeout_s``; see :mod:`service.responses.store`), so it runs on a worker lane of its
own, never on the event loop. Puts and reads get separate lanes: a put lists the store to keep it
within its bounds (tens of ms on S3 for thousands of responses), which must not hold up a
``GET /v1/responses/{id}`` queued behind it.

Every method acts for an owner, the name of the caller's API key (``""`` without keys): a
response is stored under its owner and read or deleted only by it (another key's id is
RESPONSE_NOT_FOUND, as an id never stored).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engines.errors import FailedPreconditionError
from engines.executor import DeviceExecutor
from engines.reasons import Reason
from service.responses import PutResult, ResponseStore, StoredResponse, Turn
from service.responses.records import check_record
from service.responses.turns import decode_turns


@dataclass(frozen=True, slots=True)
class ResponseStoreTask:
    """Stored responses over a :class:`~service.responses.ResponseStore`.

    Attributes:
        store: where the responses are kept.
        writes: the lane puts run on.
        reads: the lane gets, deletes and checks run on.

    """

    store: ResponseStore
    writes: DeviceExecutor
    reads: DeviceExecutor

    async def put(self, owner: str, response: StoredResponse) -> PutResult:
        """Store a new response of ``owner`` (see :meth:`ResponseStore.put` for its bounds and errors)."""
        return await self.writes.run(self.store.put, response, owner)

    async def put_built(self, owner: str, build: Callable[[], StoredResponse]) -> PutResult:
        """Store the response ``build()`` makes (on the put lane: building one is work in its size)."""
        return await self.writes.run(lambda: self.store.put(build(), owner))

    async def check_built(self, build: Callable[[], StoredResponse]) -> None:
        """Check that the response ``build()`` makes could be stored, without storing it.

        Raises:
            InvalidArgumentError: as :meth:`ResponseStore.put` for a bad id, JSON or size.

        """
        await self.reads.run(lambda: check_record(build(), self.store.limits))

    async def get(self, owner: str, response_id: str) -> StoredResponse:
        """``owner``'s stored response ``response_id``.

        :meth:`ResponseStore.get`: NOT_FOUND when absent, another key's, or expired.
        """
        return await self.reads.run(self.store.get, response_id, owner)

    async def get_with_turns(self, owner: str, response_id: str) -> tuple[StoredResponse, list[Turn]]:
        """:meth:`get`, and the turns of a created response decoded (``[]`` for one stored whole).

        Raises:
            The errors of :meth:`get`; RuntimeServiceError (INTERNAL) for unreadable turns.

        """

        def read() -> tuple[StoredResponse, list[Turn]]:
            stored = self.store.get(response_id, owner)
            return stored, decode_turns(stored.turns_json, response_id)

        return await self.reads.run(read)

    async def conversation(self, owner: str, response_id: str) -> list[Turn]:
        """The turns of ``owner``'s created response ``response_id``, oldest first, its own last.

        Raises:
            InvalidArgumentError: a malformed id (INVALID_RESPONSE_ID).
            ResponseNotFoundError: as :meth:`get` (absent, another key's, expired).
            FailedPreconditionError: the response was stored whole by a put, so the server does not
                know its conversation (RESPONSE_NOT_CONTINUABLE).
            RuntimeServiceError: INTERNAL, the record is unreadable.

        """

        def read() -> list[Turn]:
            stored = self.store.get(response_id, owner)
            turns = decode_turns(stored.turns_json, response_id)
            if not turns:
                raise FailedPreconditionError(
                    f"the stored response {response_id!r} was stored whole (PutStoredResponse), not "
                    "created by the server: its conversation cannot be continued here",
                    reason=Reason.RESPONSE_NOT_CONTINUABLE,
                    id=response_id,
                )
            return turns

        return await self.reads.run(read)

    async def delete(self, owner: str, response_id: str) -> None:
        """Delete ``owner``'s stored response ``response_id``.

        :meth:`ResponseStore.delete`: NOT_FOUND when absent or another key's.
        """
        await self.reads.run(self.store.delete, response_id, owner)
