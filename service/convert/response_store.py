"""ResponseStoreService protos ↔ :mod:`engines.response_store` dataclasses."""

from __future__ import annotations

from universal_runtime.v1 import response_store_pb2 as pb

from service.convert.validation import require
from service.tasks.response_store import PutResult, StoredResponse


def stored_response_from_pb(request: pb.PutStoredResponseRequest) -> StoredResponse:
    """The response a put asks to store (``expires_at`` is the server's, so it is ignored).

    Raises:
        InvalidArgumentError: ``response`` is unset, or ``created_at`` is negative.

    """
    require(request.HasField("response"), "response", "must be set")
    message = request.response
    require(message.created_at >= 0, "response.created_at", "must be Unix seconds, 0 or more")
    return StoredResponse(
        id=message.id,
        created_at=message.created_at,
        previous_response_id=message.previous_response_id,
        response_json=message.response_json,
        input_items_json=message.input_items_json,
    )


def stored_response_pb(response: StoredResponse) -> pb.StoredResponse:
    """The wire form of a stored response."""
    return pb.StoredResponse(
        id=response.id,
        created_at=response.created_at,
        previous_response_id=response.previous_response_id,
        response_json=response.response_json,
        input_items_json=response.input_items_json,
        expires_at=response.expires_at,
    )


def put_response(result: PutResult) -> pb.PutStoredResponseResponse:
    """The answer to a put: the id, its times, and how many responses were evicted for it."""
    return pb.PutStoredResponseResponse(
        id=result.response.id,
        created_at=result.response.created_at,
        expires_at=result.response.expires_at,
        evicted_count=result.evicted,
    )
