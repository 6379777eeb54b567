"""Stored responses of the OpenAI Responses API, kept in the state store (:mod:`engines.state_store`).

The gateway translates the Responses API; the server keeps what it stores (``store: true``) so that
``previous_response_id``, ``GET``/``DELETE /v1/responses/{id}`` and ``GET .../input_items`` work on
any replica that shares the state store (``UR_STATE_URL``). The JSON is opaque here: this module
checks that it is a JSON object (the response) and a JSON array (its input items), and bounds it.

Every response has an owner: the name of the API key that stored it (``""`` on a server without
keys). Every method takes it, and reads only that owner's responses: another key's id is
RESPONSE_NOT_FOUND, exactly as an id never stored, and ids are unique per owner (two keys may
each store ``resp_x``), so no answer tells one key what another stored.

Layout, under the store's ``responses/`` folder (``<owner>``: :func:`engines.owners.owner_segment`
of the key's name, a hash, so that any name is a safe key):

* ``data/<id>`` (a server without keys, as before owners existed) or ``data/<owner>/<id>`` (a
  key's): one response: a header line (JSON: id, created_at, previous_response_id,
  expires_at_ms, the response JSON's length) followed by the response JSON and the input items'
  JSON, as given.
* ``expiry/<expires_at_ms>-<bytes>-<id>`` (without keys) or ``expiry/<expires_at_ms>-<bytes>-<id>-<owner>``:
  an empty marker per response. Its name sorts by when the response expires (every response
  lives the same TTL, so that is also by age) and carries its size and its data's key, so one
  listing of ``expiry/`` gives the count, the bytes held and the oldest responses, without reading
  any of them. The bounds below are the store's, over every owner's responses.

Responses stored before owners existed are the keyless server's (``data/<id>``): a server with
keys finds none of them (they expire on their TTL).

Bounds (:class:`ResponseLimits`, server settings ``UR_RESPONSES_*``):

* **per response**: its response JSON plus input items' JSON at most ``max_bytes``, else
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

import json
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from engines.errors import InvalidArgumentError, RuntimeServiceError, clip_text
from engines.owners import owner_segment
from engines.state_store import StateStore

log = logging.getLogger(__name__)

#: The form of a stored response's id: ``resp_`` and 1 to 120 ASCII letters and digits. Only these
#: characters, so an id is a safe key in every store (no ``/``, ``.``, ``\``: no path traversal).
RESPONSE_ID = re.compile(r"resp_[A-Za-z0-9]{1,120}")
RESPONSE_ID_MAX_CHARS = 125

#: Most deletions (expired responses swept, oldest evicted) one put makes.
MAX_DELETES_PER_PUT = 64

DATA_DIR = "data"
EXPIRY_DIR = "expiry"
_FORMAT = 1


class ResponseNotFoundError(RuntimeServiceError, status="NOT_FOUND", reason="RESPONSE_NOT_FOUND"):
    """No stored response has this id (NOT_FOUND; reason RESPONSE_EXPIRED when it outlived its TTL)."""


class ResponseExistsError(RuntimeServiceError, status="ALREADY_EXISTS", reason="RESPONSE_ID_EXISTS"):
    """A stored response already has this id (ALREADY_EXISTS)."""


@dataclass(frozen=True, slots=True)
class ResponseLimits:
    """What the store keeps.

    Attributes:
        max_count: most responses kept; a put over it evicts the oldest.
        max_bytes: most bytes of one response (its response JSON plus its input items' JSON).
        max_total_bytes: most bytes of all responses together; a put over it evicts the oldest.
        ttl_s: seconds a response is kept after it was put.

    """

    max_count: int
    max_bytes: int
    max_total_bytes: int
    ttl_s: float


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored response.

    Attributes:
        id: ``resp_`` and 1 to 120 ASCII letters and digits.
        created_at: the response's ``created_at``, Unix seconds (0 on a put: now).
        previous_response_id: the response it continued, or ``""``.
        response_json: the response object, UTF-8 JSON (an object).
        input_items_json: its input items, UTF-8 JSON (an array).
        expires_at: when the store forgets it, Unix seconds (set by :meth:`ResponseStore.put`).

    """

    id: str
    created_at: int
    previous_response_id: str
    response_json: bytes
    input_items_json: bytes
    expires_at: int = 0

    @property
    def size(self) -> int:
        """Bytes of the JSON it holds (what ``max_bytes`` bounds)."""
        return len(self.response_json) + len(self.input_items_json)


@dataclass(frozen=True, slots=True)
class PutResult:
    """A put's outcome.

    Attributes:
        response: the response as stored (with ``created_at`` and ``expires_at``).
        evicted: responses evicted to stay within the count and byte bounds (expired ones swept
            are not counted).

    """

    response: StoredResponse
    evicted: int


def validate_response_id(value: str, field: str = "id") -> str:
    """Return ``value`` if it is a stored response's id (``resp_`` + 1 to 120 letters and digits).

    Raises:
        InvalidArgumentError: anything else (reason INVALID_RESPONSE_ID, metadata ``field``).

    """
    if not RESPONSE_ID.fullmatch(value):
        raise InvalidArgumentError(
            f"{field}: {clip_text(value, 64)!r} is not a response id; expected 'resp_' followed by 1 to 120 "
            "ASCII letters and digits",
            reason="INVALID_RESPONSE_ID",
            field=field,
            value=value,
        )
    return value


def _check_json(data: bytes, kind: type, field: str) -> None:
    what = "a JSON object" if kind is dict else "a JSON array"
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError; depth: RecursionError
        value = None
    if not isinstance(value, kind):
        raise InvalidArgumentError(
            f"{field} must be {what} in UTF-8", reason="INVALID_RESPONSE_JSON", field=field
        )


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
        validate_response_id(response.id, "id")
        if response.previous_response_id:
            validate_response_id(response.previous_response_id, "previous_response_id")
        limit = min(self.limits.max_bytes, self.limits.max_total_bytes)
        if response.size > limit:
            raise InvalidArgumentError(
                f"the response and its input items are {response.size} bytes of JSON; the server stores "
                f"at most {limit} bytes per response (setting responses_max_bytes)",
                reason="RESPONSE_TOO_LARGE",
                bytes=response.size,
                max_bytes=limit,
            )
        _check_json(response.response_json, dict, "response_json")
        _check_json(response.input_items_json, list, "input_items_json")
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
            marker.data_key, _encode(stored, expires_at_ms)
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
                reason="RESPONSE_EXPIRED",
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
            raise _not_found(response_id)
        response, expires_at_ms = _decode(data, response_id)
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


def _not_found(response_id: str) -> ResponseNotFoundError:
    return ResponseNotFoundError(
        f"no stored response has id {response_id!r} (never stored, deleted, or evicted)", id=response_id
    )


def _encode(response: StoredResponse, expires_at_ms: int) -> bytes:
    header = {
        "format": _FORMAT,
        "id": response.id,
        "created_at": response.created_at,
        "previous_response_id": response.previous_response_id,
        "expires_at_ms": expires_at_ms,
        "response_bytes": len(response.response_json),
    }
    return b"".join((json.dumps(header).encode(), b"\n", response.response_json, response.input_items_json))


def _decode(data: bytes, response_id: str) -> tuple[StoredResponse, int]:
    """The response in a ``data/`` file and when it expires (ms).

    Raises:
        RuntimeServiceError: INTERNAL, the file is not one this module wrote (its trace is logged).

    """
    line, _, body = data.partition(b"\n")
    try:
        header = json.loads(line)
        split = int(header["response_bytes"])
        response = StoredResponse(
            id=str(header["id"]),
            created_at=int(header["created_at"]),
            previous_response_id=str(header["previous_response_id"]),
            response_json=body[:split],
            input_items_json=body[split:],
            expires_at=math.ceil(int(header["expires_at_ms"]) / 1000),
        )
        return response, int(header["expires_at_ms"])
    except (ValueError, KeyError, TypeError) as exc:
        log.exception("stored response unreadable", extra={"response_id": response_id})
        raise RuntimeServiceError(f"the stored response {response_id!r} is unreadable") from exc
