"""One stored response: its fields, its bounds, its checks, and its bytes in the state store.

A record holds the JSON the gateway gave (opaque here: only checked to be a JSON object and a JSON
array) and, for a response the server created itself (``CreateResponse``), the conversation it
continued and its answer in the server's own terms (``turns_json``, see :mod:`service.responses.turns`).

A ``data/`` file is a header line (JSON: format, id, created_at, previous_response_id,
expires_at_ms, the response JSON's length and the turns' length) followed by the response JSON, the
input items' JSON and the turns' JSON. Files of format 1 (before turns existed) have no
``turns_bytes`` and read as records without turns.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass
from typing import Any

from engines.errors import InvalidArgumentError, RuntimeServiceError, clip_text
from engines.reasons import Reason

log = logging.getLogger(__name__)

#: The form of a stored response's id: ``resp_`` and 1 to 120 ASCII letters and digits. Only these
#: characters, so an id is a safe key in every store (no ``/``, ``.``, ``\``: no path traversal).
RESPONSE_ID = re.compile(r"resp_[A-Za-z0-9]{1,120}")
RESPONSE_ID_MAX_CHARS = 125

_FORMAT = 2


class ResponseNotFoundError(RuntimeServiceError, status="NOT_FOUND", reason=Reason.RESPONSE_NOT_FOUND):
    """No stored response has this id (NOT_FOUND; reason RESPONSE_EXPIRED when it outlived its TTL)."""


class ResponseExistsError(RuntimeServiceError, status="ALREADY_EXISTS", reason=Reason.RESPONSE_ID_EXISTS):
    """A stored response already has this id (ALREADY_EXISTS)."""


@dataclass(frozen=True, slots=True)
class ResponseLimits:
    """What the store keeps.

    Attributes:
        max_count: most responses kept; a put over it evicts the oldest.
        max_bytes: most bytes of one response (its response JSON, input items' JSON and turns).
        max_total_bytes: most bytes of all responses together; a put over it evicts the oldest.
        ttl_s: seconds a response is kept after it was put.

    """

    max_count: int
    max_bytes: int
    max_total_bytes: int
    ttl_s: float

    @property
    def record_bytes(self) -> int:
        """Most bytes one response may hold: ``max_bytes``, and never more than all may hold."""
        return min(self.max_bytes, self.max_total_bytes)


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored response.

    Attributes:
        id: ``resp_`` and 1 to 120 ASCII letters and digits.
        created_at: the response's ``created_at``, Unix seconds (0 on a put: now).
        previous_response_id: the response it continued, or ``""``.
        response_json: the response object, UTF-8 JSON (an object); for a response the server
            created, the gateway's response object before its answer.
        input_items_json: its input items, UTF-8 JSON (an array); ``[]`` for a response the
            server created (each turn holds its own).
        expires_at: when the store forgets it, Unix seconds (set by the store's put).
        turns_json: the conversation of a response the server created, oldest turn first and
            this response's last (:func:`service.responses.turns.encode_turns`); ``b""`` for a
            response stored whole by ``PutStoredResponse``.

    """

    id: str
    created_at: int
    previous_response_id: str
    response_json: bytes
    input_items_json: bytes
    expires_at: int = 0
    turns_json: bytes = b""

    @property
    def size(self) -> int:
        """Bytes the response holds (what ``max_bytes`` bounds)."""
        return len(self.response_json) + len(self.input_items_json) + len(self.turns_json)


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
            reason=Reason.INVALID_RESPONSE_ID,
            field=field,
            value=value,
        )
    return value


def load_json(data: bytes, kind: type, field: str) -> Any:
    """``data`` parsed, if it is UTF-8 JSON of ``kind`` (``dict``: an object, ``list``: an array).

    Raises:
        InvalidArgumentError: it is not (reason INVALID_RESPONSE_JSON, metadata ``field``).

    """
    what = "a JSON object" if kind is dict else "a JSON array"
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError; depth: RecursionError
        value = None
    if not isinstance(value, kind):
        raise InvalidArgumentError(
            f"{field} must be {what} in UTF-8", reason=Reason.INVALID_RESPONSE_JSON, field=field
        )
    return value


def check_size(size: int, limits: ResponseLimits) -> None:
    """Check that a response of ``size`` bytes may be stored.

    Raises:
        InvalidArgumentError: it is over :attr:`ResponseLimits.record_bytes` (RESPONSE_TOO_LARGE,
            metadata ``bytes`` and ``max_bytes``).

    """
    limit = limits.record_bytes
    if size > limit:
        raise InvalidArgumentError(
            f"the response and its input items are {size} bytes of JSON; the server stores "
            f"at most {limit} bytes per response (setting responses_max_bytes)",
            reason=Reason.RESPONSE_TOO_LARGE,
            bytes=size,
            max_bytes=limit,
        )


def check_record(response: StoredResponse, limits: ResponseLimits) -> None:
    """Check a response about to be stored: its ids, its size, then its JSON.

    Raises:
        InvalidArgumentError: a bad id or previous id (INVALID_RESPONSE_ID), more than
            ``max_bytes`` (RESPONSE_TOO_LARGE), or JSON that is not an object and an array
            (INVALID_RESPONSE_JSON).

    """
    validate_response_id(response.id, "id")
    if response.previous_response_id:
        validate_response_id(response.previous_response_id, "previous_response_id")
    check_size(response.size, limits)
    load_json(response.response_json, dict, "response_json")
    load_json(response.input_items_json, list, "input_items_json")


def not_found(response_id: str) -> ResponseNotFoundError:
    """The error for an id the owner has no response of."""
    return ResponseNotFoundError(
        f"no stored response has id {response_id!r} (never stored, deleted, or evicted)", id=response_id
    )


def encode(response: StoredResponse, expires_at_ms: int) -> bytes:
    """The ``data/`` file of a response that expires at ``expires_at_ms`` (Unix ms)."""
    header = {
        "format": _FORMAT,
        "id": response.id,
        "created_at": response.created_at,
        "previous_response_id": response.previous_response_id,
        "expires_at_ms": expires_at_ms,
        "response_bytes": len(response.response_json),
        "turns_bytes": len(response.turns_json),
    }
    return b"".join(
        (
            json.dumps(header).encode(),
            b"\n",
            response.response_json,
            response.input_items_json,
            response.turns_json,
        )
    )


def decode(data: bytes, response_id: str) -> tuple[StoredResponse, int]:
    """The response in a ``data/`` file (format 1 or 2) and when it expires (Unix ms).

    Raises:
        RuntimeServiceError: INTERNAL, the file is not one this module wrote (its trace is logged).

    """
    line, _, body = data.partition(b"\n")
    try:
        header = json.loads(line)
        split = int(header["response_bytes"])
        turns = int(header.get("turns_bytes", 0))
        if not 0 <= split <= len(body) - turns or turns < 0:
            raise ValueError("lengths past the file's end")
        response = StoredResponse(
            id=str(header["id"]),
            created_at=int(header["created_at"]),
            previous_response_id=str(header["previous_response_id"]),
            response_json=body[:split],
            input_items_json=body[split : len(body) - turns],
            expires_at=math.ceil(int(header["expires_at_ms"]) / 1000),
            turns_json=body[len(body) - turns :],
        )
        return response, int(header["expires_at_ms"])
    except (ValueError, KeyError, TypeError) as exc:
        log.exception("stored response unreadable", extra={"response_id": response_id})
        raise RuntimeServiceError(f"the stored response {response_id!r} is unreadable") from exc
