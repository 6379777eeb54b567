"""Responses API requests as ``CreateResponse`` calls, and stored responses back as OpenAI JSON.

The server creates a response in one call (``CreateResponse``/``CreateResponseStream``): it reads
the conversation of ``previous_response_id``, generates the new turn after it and stores the new
response. The gateway sends the new turn already translated (``input`` as chat messages,
``instructions`` apart) and two JSON documents the server keeps without reading them: the response
object before its answer (:meth:`ResponseHeader.template`) and the request's own input items, as
:func:`gateway.translate.responses.item_json` lists them.

A record the server created comes back with its conversation's turns (each one's input items and
answer); the response object is the template with the last answer rendered in
(:func:`gateway.translate.responses.render_response`), and ``GET .../input_items`` lists each
earlier turn's input items and output, then the response's own input (OpenAI's list object, newest
first unless ``order=asc``). A record stored whole (``PutStoredResponse``) holds that JSON as is.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from universal_runtime.v1 import response_store_pb2

from gateway.translate import responses as translate
from gateway.translate.responses import ResponseHeader, item_json

MAX_INPUT_ITEMS_PAGE = 100
"""Most items one ``input_items`` page returns (OpenAI's bound of ``limit``)."""


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def new_response(header: ResponseHeader) -> response_store_pb2.NewResponse:
    """What the server needs to continue, generate and store a request's response."""
    request = header.request
    return response_store_pb2.NewResponse(
        id=header.id,
        created_at=header.created_at,
        previous_response_id=request.previous_response_id or "",
        store=request.store,
        instructions=request.instructions or "",
        header_json=_json_bytes(header.template()),
        input_items_json=_json_bytes([item_json(item) for item in request.input_items]),
    )


def create_request(header: ResponseHeader) -> response_store_pb2.CreateResponseRequest:
    """The ``CreateResponse`` call of a non-streamed request.

    Raises:
        GatewayError: 400 for a ``function_call_output`` that answers no call of the request
            (one of the conversation continued is the server's to find).

    """
    return response_store_pb2.CreateResponseRequest(
        generate=translate.generate_request(header.request), response=new_response(header)
    )


def create_stream_request(header: ResponseHeader) -> response_store_pb2.CreateResponseStreamRequest:
    """The ``CreateResponseStream`` call of a streamed request (errors as :func:`create_request`)."""
    return response_store_pb2.CreateResponseStreamRequest(
        generate=translate.generate_stream_request(header.request), response=new_response(header)
    )


def response_object(stored: response_store_pb2.StoredResponse) -> dict[str, Any]:
    """The response object of a record."""
    template = json.loads(stored.response_json)
    if not stored.turns:
        return template  # stored whole
    return translate.render_response(template, stored.id, stored.turns[-1].answer)


def _input_items(stored: response_store_pb2.StoredResponse) -> list[dict[str, Any]]:
    """The conversation a record's response answered: earlier turns' inputs and outputs, then its input."""
    if not stored.turns:
        return json.loads(stored.input_items_json)
    items: list[dict[str, Any]] = []
    *earlier, last = stored.turns
    for turn in earlier:
        items += json.loads(turn.input_items_json)
        choice = turn.answer.choices[0] if turn.answer.choices else None
        if choice is not None:
            items += translate.output_items(choice, turn.response_id)
    return items + json.loads(last.input_items_json)


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
    items = _input_items(stored)
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
