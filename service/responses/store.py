"""The store of the OpenAI Responses API's responses, kept in the state store (:mod:`engines.state_store`).

The gateway translates the Responses API; the server keeps what it stores (``store: true``) so that
``previous_response_id``, ``GET``/``DELETE /v1/responses/{id}`` and ``GET .../input_items`` work on
any replica that shares the state store (``UR_STATE_URL``). What one response holds, and its
checks, are in :mod:`service.responses.records`.

Every response has an owner: the name of the API key that stored it (``""`` on a server without
keys). Every method takes it, and reads only that owner's responses: another key's id is
RESPONSE_NOT_FOUND, exactly as an id never stored, and ids are unique per owner (two keys may
each store ``resp_x``), so no answer tells one key what another stored.

Layout, under the store's ``responses/`` folder (``<owner>``: :func:`engines.owners.owner_segment`
of the key's name, a hash, so that any name is a safe key):

* ``data/<id>`` (a server without keys, as before owners existed) or ``data/<owner>/<id>`` (a
  key's): one response, as :func:`service.responses.records.encode` writes it.
* ``expiry/<expires_at_ms>-<bytes>-<id>`` (without keys) or ``expiry/<expires_at_ms>-<bytes>-<id>-<owner>``:
  an empty marker per response. Its name sorts by when the response expires (every response
  lives the same TTL, so that is also by age) and carries its size and its data's key, so one
  listing of ``expiry/`` gives the count, the bytes held and the oldest responses, without reading
  any of them. The bounds below are the store's, over every owner's responses.

Responses stored before owners existed are the keyless server's (``data/<id>``): a server with
keys finds none of them (they expire on their TTL).

Bounds (:class:`ResponseLimits`, server settings ``UR_RESPONSES_*``):

* **per response**: all it holds (:attr:`StoredResponse.size`) at most ``max_bytes``, else
  INVALID_ARGUMENT, reason RESPONSE_TOO_LARGE (nothing is stored);
* **count and total bytes**: a put that would take the store over ``max_count`` responses or
  ``max_total_bytes`` evicts the responses that expire first (the oldest) until it fits, as a
  cache does; OpenAI keeps stored responses for a while, not forever, so clients already handle a
  response that is gone (404). At most :data:`MAX_DELETES_PER_PUT` deletions per put (expired and
  evicted together), so one put stays bounded in time: only a lowered setting needs more, and
  later puts finish the job;
* **age**: a response is readable ``ttl_s`` seconds after it was put; after that a read answers
  NOT_FOUND, reason RESPONSE_EXPIRED, and deletes it; puts sweep expired ones too.

Replicas racing: a put writes its marker first, then its data with an exclusive create, so a crash
between the two leaves only a marker (swept or evicted later), never data that nothing would ever
evict. Two replicas evicting at once may each delete one: the store can hold a little less than the
bound, never more than the bound plus the puts in flight.

Every method is blocking (callers run it on a worker thread, :mod:`service.tasks.response_store`),
and each store call within it is bounded by the store's ``timeout_s``.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from engines.owners import owner_segment
from engines.reasons import Reason
from engines.state_store import StateStore
from service.responses.records import (
    RESPONSE_ID,
    PutResult,
    ResponseExistsError,
    ResponseLimits,
    ResponseNotFoundError,
    StoredResponse,
    check_record,
    decode,
    encode,
    not_found,
    validate_response_id,
)

log = logging.getLogger(__name__)

#: Most deletions (expired responses swept, oldest evicted) one put makes.
MAX_DELETES_PER_PUT = 64

DATA_DIR = "data"
EXPIRY_DIR = "expiry"

_SEGMENT = re.compile(r"[0-9a-f]{32}")


def _segment(owner: str) -> str:
    """The owner's part of a response's keys: ``""`` without keys, else its hash."""
    return owner_segment(owner) if owner else ""


@dataclass(frozen=True, slots=True, order=True)
class _Marker:
    """An ``expiry/`` marker, parsed: ordering is by expiry, then id.

    ``owner`` is the owner's segment (:func:`_segment`): ``""`` for a response of a server
    without keys.
    """

    expires_at_ms: int
    id: str
    size: int
    owner: str = ""

    @property
    def key(self) -> str:
        suffix = f"-{self.owner}" if self.owner else ""
        return f"{EXPIRY_DIR}/{self.expires_at_ms:015d}-{self.size}-{self.id}{suffix}"

    @property
    def data_key(self) -> str:
        return _data_key(self.owner, self.id)

    @classmethod
    def parse(cls, key: str) -> _Marker | None:
        name = key.rpartition("/")[2]
        expires, _, rest = name.partition("-")
        size, _, rest = rest.partition("-")
        response_id, _, owner = rest.partition("-")  # an id has no '-'
        if not (
            expires.isdigit()
            and size.isdigit()
            and RESPONSE_ID.fullmatch(response_id)
            and (not owner or _SEGMENT.fullmatch(owner))
        ):
            return None  # a stray file (a temporary one of a crashed write): not a response's
        return cls(int(expires), response_id, int(size), owner)


def _data_key(segment: str, response_id: str) -> str:
    return f"{DATA_DIR}/{segment}/{response_id}" if segment else f"{DATA_DIR}/{response_id}"


class ResponseStore:
    """Stored responses in a :class:`~engines.state_store.StateStore` folder, within :class:`ResponseLimits`.

    Args:
        store: the folder (``state.child("responses")``).
        limits: the bounds.
        clock: seconds since the epoch (tests move time forward).

    Every method raises :class:`~engines.errors.UnavailableError` (STATE_STORE_UNAVAILABLE) or
    :class:`~engines.errors.ResourceExhaustedError` (STORAGE_FULL) when the store itself fails.

    """

    def __init__(
        self, store: StateStore, limits: ResponseLimits, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.limits = limits
        self._clock = clock

    def put(self, response: StoredResponse, owner: str = "") -> PutResult:
        """Store a new response of ``owner``, first sweeping expired ones and evicting the oldest over bounds.

        Args:
            response: the response.
            owner: the name of the API key storing it (``""`` without keys).

        Raises:
            InvalidArgumentError: a bad id or previous id (INVALID_RESPONSE_ID), JSON that is not an
                object and an array (INVALID_RESPONSE_JSON), or more than ``max_bytes`` (or
                ``max_total_bytes``) of it (RESPONSE_TOO_LARGE).
            ResponseExistsError: ``owner`` has a response of that id (ALREADY_EXISTS,
                RESPONSE_ID_EXISTS); another owner's of the same id does not count.

        """
        check_record(response, self.limits)
        now = self._clock()
        expires_at_ms = math.floor((now + self.limits.ttl_s) * 1000)
        stored = replace(
            response,
            created_at=response.created_at or int(now),
            expires_at=math.ceil(expires_at_ms / 1000),
        )
        evicted = self._make_room(int(now * 1000), response.size)
        marker = _Marker(expires_at_ms, stored.id, stored.size, _segment(owner))
        # The marker first: a crash before the data leaves a marker that eviction clears, never
        # data that no listing of expiry/ names.
        if not self.store.create(marker.key, b"") or not self.store.create(
            marker.data_key, encode(stored, expires_at_ms)
        ):
            self.store.delete(marker.key)
            raise ResponseExistsError(f"a stored response with id {stored.id!r} exists already", id=stored.id)
        return PutResult(stored, evicted)

    def get(self, response_id: str, owner: str = "") -> StoredResponse:
        """The stored response ``response_id`` of ``owner`` (an API key's name, ``""`` without keys).

        Raises:
            InvalidArgumentError: a malformed id (INVALID_RESPONSE_ID).
            ResponseNotFoundError: ``owner`` has none of this id (RESPONSE_NOT_FOUND; also when
                another owner has), or it outlived the TTL (RESPONSE_EXPIRED; it is deleted).

        """
        response, marker = self._read(response_id, owner)
        if marker.expires_at_ms <= self._clock() * 1000:
            self._remove(marker)
            raise ResponseNotFoundError(
                f"the stored response {response_id!r} expired (responses are kept "
                f"{self.limits.ttl_s:g} s; setting responses_ttl_s)",
                reason=Reason.RESPONSE_EXPIRED,
                id=response_id,
            )
        return response

    def delete(self, response_id: str, owner: str = "") -> None:
        """Delete the stored response ``response_id`` of ``owner`` (an API key's name, ``""`` without keys).

        Raises:
            InvalidArgumentError: a malformed id (INVALID_RESPONSE_ID).
            ResponseNotFoundError: ``owner`` has none of this id (RESPONSE_NOT_FOUND; another
                owner's is left alone).

        """
        self._remove(self._read(response_id, owner)[1])

    def _read(self, response_id: str, owner: str) -> tuple[StoredResponse, _Marker]:
        """``owner``'s response ``response_id`` and its marker (expired or not).

        Raises:
            InvalidArgumentError: a malformed id. ResponseNotFoundError: ``owner`` has none.

        """
        validate_response_id(response_id)
        segment = _segment(owner)
        data = self.store.read(_data_key(segment, response_id))
        if data is None:
            raise not_found(response_id)
        response, expires_at_ms = decode(data, response_id)
        return response, _Marker(expires_at_ms, response_id, response.size, segment)

    def _remove(self, marker: _Marker) -> None:
        # The data first: once it is gone the response is, and a marker left by a crash is swept.
        self.store.delete(marker.data_key)
        self.store.delete(marker.key)

    def _make_room(self, now_ms: int, new_bytes: int) -> int:
        """Sweep expired responses, then evict the oldest until one more of ``new_bytes`` fits.

        Returns the number evicted (live responses deleted). At most :data:`MAX_DELETES_PER_PUT`
        deletions in all.
        """
        markers = sorted(m for m in map(_Marker.parse, self.store.sizes(EXPIRY_DIR)) if m is not None)
        budget = MAX_DELETES_PER_PUT
        expired = 0
        while expired < len(markers) and markers[expired].expires_at_ms <= now_ms and budget:
            self._remove(markers[expired])
            expired += 1
            budget -= 1
        live = markers[expired:]
        held = sum(m.size for m in live)
        evicted = 0
        while (
            live[evicted:]
            and budget
            and (
                len(live) - evicted + 1 > self.limits.max_count
                or held + new_bytes > self.limits.max_total_bytes
            )
        ):
            self._remove(live[evicted])
            held -= live[evicted].size
            evicted += 1
            budget -= 1
        if evicted:
            log.info(
                "stored responses evicted to stay within their bounds",
                extra={"evicted": evicted, "kept": len(live) - evicted, "bytes": held},
            )
        return evicted
