"""OpenAI Responses API: ``POST /v1/responses``, and the stored responses' routes.

Creating a response is one ``CreateResponse``/``CreateResponseStream`` call: the server continues
``previous_response_id``, generates and stores; ``GET``/``DELETE /v1/responses/{id}`` and
``GET /v1/responses/{id}/input_items`` call ``ResponseStoreService`` too. The gateway translates
the OpenAI body into the call and the answer back into OpenAI JSON or typed SSE events.

Source: https://platform.openai.com/docs/api-reference/responses. A stored response lives in the
server's state store, so replicas sharing ``UR_STATE_URL`` see each other's; its bounds (count,
bytes, age) are the server's ``UR_RESPONSES_*`` settings.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Annotated, Any, Literal

import grpc
from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from universal_runtime.v1 import response_store_pb2

from engines.reasons import Reason
from gateway.calls import Rpc, RpcContext
from gateway.errors import GatewayError, error_info_from_rpc_error
from gateway.json_body import JsonBodyRoute, off_loop_for_body, off_loop_if_large
from gateway.responses import JsonResponse
from gateway.schemas.base import unknown_fields_text
from gateway.schemas.responses import MAX_ID_CHARS, FunctionCallOutputItem, ResponseRequest
from gateway.translate import responses as translate
from gateway.translate.responses_store import (
    MAX_INPUT_ITEMS_PAGE,
    create_request,
    create_stream_request,
    input_items_page,
    response_object,
)
from gateway.translate.responses_stream import ResponseStreamTranslator

logger = logging.getLogger(__name__)

router = APIRouter(tags=["responses"], route_class=JsonBodyRoute)

_ANY_OBJECT = dict[str, Any]
ResponseId = Annotated[str, Path(max_length=MAX_ID_CHARS)]

# The server's reasons for a previous_response_id it cannot continue, answered as OpenAI does.
_PREVIOUS_NOT_FOUND = frozenset({Reason.RESPONSE_NOT_FOUND, Reason.RESPONSE_EXPIRED})


async def _get(rpc: RpcContext, response_id: str) -> response_store_pb2.StoredResponse:
    request = response_store_pb2.GetStoredResponseRequest(id=response_id)
    reply = await rpc.unary(rpc.clients.responses.GetStoredResponse, request)
    return reply.response


def _stored_bytes(stored: response_store_pb2.StoredResponse) -> int:
    """The bytes a stored response holds (at most the store's ``UR_RESPONSES_MAX_BYTES``)."""
    return stored.ByteSize()


def _create_error(err: grpc.aio.AioRpcError, body: ResponseRequest) -> GatewayError | None:
    """OpenAI's answer to a create the server refused for its chain, or ``None`` for the usual mapping.

    404 ``previous_response_not_found`` for an unknown, expired or another key's
    ``previous_response_id``; 400 ``invalid_value`` (``param`` ``previous_response_id``) for a
    malformed one; 400 ``invalid_value`` (``param`` ``input[i].call_id``) for a function call
    output that answers no call of the conversation.
    """
    info = error_info_from_rpc_error(err)
    reason = info.reason if info is not None else ""
    field = info.metadata.get("field", "") if info is not None else ""
    previous = body.previous_response_id
    if previous is not None and err.code() == grpc.StatusCode.NOT_FOUND and reason in _PREVIOUS_NOT_FOUND:
        return GatewayError(
            404,
            f"Previous response with id '{previous}' not found.",
            code="previous_response_not_found",
            param="previous_response_id",
        )
    if previous is not None and reason == Reason.INVALID_RESPONSE_ID and field != "id":
        return GatewayError(
            400, err.details() or "invalid response id", code="invalid_value", param="previous_response_id"
        )
    if reason == Reason.TOOL_CALL_NOT_FOUND:
        call_id = info.metadata.get("tool_call_id", "") if info is not None else ""
        where = next(
            (
                f"input[{i}].call_id"
                for i, item in enumerate(body.input_items)
                if isinstance(item, FunctionCallOutputItem) and item.call_id == call_id
            ),
            "input",
        )
        return GatewayError(
            400,
            f"No function call found for function_call_output with call_id '{call_id}'",
            code="invalid_value",
            param=where,
        )
    return None


@router.post("/v1/responses", response_model=None)
async def create_response(body: ResponseRequest, rpc: Rpc) -> Response:
    """Create a model response (OpenAI ``responses.create``): one ``CreateResponse`` call.

    Returns the ``response`` object (:class:`gateway.translate.responses.ResponseHeader`), or with
    ``stream: true`` the typed SSE events of
    :mod:`gateway.translate.responses_stream`. With ``store`` (the default) the server keeps the
    response before it answers (or before the stream's end, and so before ``response.completed``),
    so a request that names it as ``previous_response_id`` finds it at once.

    Raises:
        GatewayError: 404 ``previous_response_not_found``; 400 for a malformed
            ``previous_response_id`` or a ``function_call_output`` that answers no call.
        grpc.aio.AioRpcError: The server refused or failed the request: unknown model 404
            ``model_not_found``, a conversation over the context 400 ``context_length_exceeded``,
            a response over the store's byte bound 400 ``response_too_large`` (before generation
            when the chain and the request already are; see :mod:`gateway.errors`).

    """
    if body.include:
        logger.warning("responses: include not served: %s", unknown_fields_text(body.include))
    rpc = rpc.for_model(body.model)
    header = translate.ResponseHeader.new(body)
    stub = rpc.clients.responses
    try:
        if body.stream:
            message = await off_loop_for_body(rpc.request, create_stream_request, header)
            translator = ResponseStreamTranslator(header)
            return await rpc.stream_generation(
                message, translator, translator, method=stub.CreateResponseStream
            )
        message = await off_loop_for_body(rpc.request, create_request, header)
        answer = await rpc.unary(stub.CreateResponse, message)
    except grpc.aio.AioRpcError as err:
        mapped = _create_error(err, body)
        if mapped is None:
            raise
        raise mapped from None
    return JsonResponse(translate.response_json(header, answer.answer))


def _json_response(read: Callable[[Any], Any], stored: response_store_pb2.StoredResponse) -> JsonResponse:
    """``read(stored)`` (a stored record's JSON parsed and shaped) as a rendered JSON response."""
    return JsonResponse(read(stored))


@router.get("/v1/responses/{response_id}", response_model=_ANY_OBJECT)
async def get_response(response_id: ResponseId, rpc: Rpc) -> JsonResponse:
    """Return a stored response object (OpenAI ``responses.retrieve``).

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (404 ``response_not_found``, ``response_expired``) for an
            unknown, deleted or expired id; INVALID_ARGUMENT (400) for a malformed one.

    """
    stored = await _get(rpc, response_id)
    return await off_loop_if_large(_stored_bytes(stored), _json_response, response_object, stored)


@router.delete("/v1/responses/{response_id}", response_model=_ANY_OBJECT)
async def delete_response(response_id: ResponseId, rpc: Rpc) -> JsonResponse:
    """Delete a stored response (OpenAI ``responses.delete``).

    Returns ``{"id", "object": "response", "deleted": true}``.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (404) for an unknown id.

    """
    request = response_store_pb2.DeleteStoredResponseRequest(id=response_id)
    reply = await rpc.unary(rpc.clients.responses.DeleteStoredResponse, request)
    return JsonResponse({"id": reply.id, "object": "response", "deleted": reply.deleted})


@router.get("/v1/responses/{response_id}/input_items", response_model=_ANY_OBJECT)
async def list_input_items(
    response_id: ResponseId,
    rpc: Rpc,
    limit: Annotated[int, Query(ge=1, le=MAX_INPUT_ITEMS_PAGE)] = 20,
    order: Literal["asc", "desc"] = "desc",
    after: Annotated[str | None, Query(max_length=MAX_ID_CHARS)] = None,
) -> JsonResponse:
    """List a stored response's input items (OpenAI ``responses.input_items.list``).

    The items are the conversation the response answered: those of the chain it continued, then
    its own input. Pages of ``limit`` (1 to 100, default 20) items, newest first unless
    ``order=asc``, starting after the item ``after``.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (404) for an unknown id.

    """
    stored = await _get(rpc, response_id)
    page = functools.partial(input_items_page, limit=limit, order=order, after=after)
    return await off_loop_if_large(_stored_bytes(stored), _json_response, page, stored)
