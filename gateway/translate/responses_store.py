"""Stored responses of the Responses API as ``ResponseStoreService`` records, and back.

A record holds the response object (``response_json``) and its conversation before the answer
(``input_items_json``): the items of the chain it continued (their inputs and outputs) followed by
its own input, as :func:`gateway.translate.responses.item_json` lists them. Continuing it
(``previous_response_id``) then takes one read: its input items, its output, then the new input.
``GET /v1/responses/{id}/input_items`` lists those items (OpenAI's list object, newest first
unless ``order=asc``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from universal_runtime.v1 import response_store_pb2

from gateway.translate.responses import Item, ResponseHeader, item_json, parse_items

MAX_INPUT_ITEMS_PAGE = 100
"""Most items one ``input_items`` page returns (OpenAI's bound of ``limit``)."""


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def stored_response(
    header: ResponseHeader, response: dict[str, Any], earlier: Sequence[dict[str, Any]]
) -> response_store_pb2.StoredResponse:
    """The record of a finished response.

    Args:
        header: The response's id, creation time and request.
        response: The final response object.
        earlier: The chain's items (JSON) before this request's input.

    """
    items = [*earlier, *(item_json(item) for item in header.request.input_items)]
    return response_store_pb2.StoredResponse(
        id=header.id,
        created_at=header.created_at,
        previous_response_id=header.request.previous_response_id or "",
        response_json=_json_bytes(response),
        input_items_json=_json_bytes(items),
    )


def response_object(stored: response_store_pb2.StoredResponse) -> dict[str, Any]:
    """The response object of a record."""
    return json.loads(stored.response_json)


def chain_json(stored: response_store_pb2.StoredResponse) -> list[dict[str, Any]]:
    """The conversation a response continuing ``stored`` starts from: its input items, then its output."""
    return [*json.loads(stored.input_items_json), *response_object(stored)["output"]]


def chain_items(chain: list[dict[str, Any]]) -> list[Item]:
    """:func:`chain_json` as input items.

    Raises:
        pydantic.ValidationError: The record does not hold items (a corrupt store entry).

    """
    return parse_items(chain)


def input_items_page(
    stored: response_store_pb2.StoredResponse,
    *,
    limit: int,
    order: Literal["asc", "desc"],
    after: str | None,
) -> dict[str, Any]:
    """One page of a response's input items.

    ``{"object": "list", "data", "first_id", "last_id", "has_more"}``, as OpenAI lists them.

    Args:
        stored: The record.
        limit: Items per page, 1 to :data:`MAX_INPUT_ITEMS_PAGE`.
        order: ``desc`` (newest first, OpenAI's default) or ``asc``.
        after: An item id: the page starts after it (an unknown id gives an empty page).

    """
    items = json.loads(stored.input_items_json)
    if order == "desc":
        items.reverse()
    if after is not None:
        position = next((i for i, item in enumerate(items) if item.get("id") == after), len(items))
        items = items[position + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0].get("id") if page else None,
        "last_id": page[-1].get("id") if page else None,
        "has_more": len(items) > limit,
    }
