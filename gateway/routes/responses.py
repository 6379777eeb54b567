"""OpenAI Responses API: ``POST /v1/responses``, and the stored responses' routes.

Creating a response calls ``Generate``/``GenerateStream``; ``GET``/``DELETE /v1/responses/{id}``
and ``GET /v1/responses/{id}/input_items`` call ``ResponseStoreService``.

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
from pydantic import ValidationError
from universal_runtime.v1 import response_store_pb2

from gateway.calls import Rpc, RpcContext
from gateway.errors import GatewayError
from gateway.json_body import JsonBodyRoute, off_loop_if_large
from gateway.responses import JsonResponse
from gateway.schemas.base import unknown_fields_text
from gateway.schemas.responses import MAX_ID_CHARS, ResponseRequest
from gateway.translate import responses as translate
from gateway.translate.responses_store import (
    MAX_INPUT_ITEMS_PAGE,
    chain_items,
    chain_json,
    input_items_page,
    response_object,
    stored_response,
)
from gateway.translate.responses_stream import ResponseStreamTranslator

logger = logging.getLogger(__name__)

router = APIRouter(tags=["responses"], route_class=JsonBodyRoute)

_ANY_OBJECT = dict[str, Any]
ResponseId = Annotated[str, Path(max_length=MAX_ID_CHARS)]


async def _get(rpc: RpcContext, response_id: str) -> response_store_pb2.StoredResponse:
    request = response_store_pb2.GetStoredResponseRequest(id=response_id)
    reply = await rpc.unary(rpc.clients.responses.GetStoredResponse, request)
    return reply.response


def _stored_bytes(stored: response_store_pb2.StoredResponse) -> int:
    """The JSON a stored response holds, in bytes (at most the store's ``UR_RESPONSES_MAX_BYTES``)."""
    return len(stored.response_json) + len(stored.input_items_json)


async def _previous(rpc: RpcContext, body: ResponseRequest) -> tuple[list[dict[str, Any]], int]:
    """The chain's items (JSON) that ``previous_response_id`` continues, and their size in bytes.

    ``([], 0)`` without one. The record is parsed in a worker thread when large (up to the
    store's 4 MiB), as a large body is.

    Raises:
        GatewayError: 404 ``previous_response_not_found`` (or 400 for a malformed id), with
            ``param`` ``previous_response_id``, as OpenAI answers.

    """
    if body.previous_response_id is None:
        return [], 0
    try:
        stored = await _get(rpc, body.previous_response_id)
    except grpc.aio.AioRpcError as err:
        if err.code() == grpc.StatusCode.NOT_FOUND:
            raise GatewayError(
                404,
                f"Previous response with id '{body.previous_response_id}' not found.",
                code="previous_response_not_found",
                param="previous_response_id",
            ) from None
        if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
            raise GatewayError(
                400,
                err.details() or "invalid response id",
                code="invalid_value",
                param="previous_response_id",
            ) from None
        raise
    size = _stored_bytes(stored)
    return await off_loop_if_large(size, chain_json, stored), size


def _translate(body: ResponseRequest, chain: list[dict[str, Any]]) -> Any:
    """The ``GenerateRequest`` (or ``GenerateStreamRequest`` with ``stream``) of a body and its chain.

    Raises:
        GatewayError: 400 for a function call output without its call; 500 for a corrupt record.

    """
    try:
        earlier = chain_items(chain)
    except ValidationError:
        raise GatewayError(500, "the stored previous response is unreadable", code="internal_error") from None
    build = translate.generate_stream_request if body.stream else translate.generate_request
    return build(body, earlier)


@router.post("/v1/responses", response_model=None)
async def create_response(body: ResponseRequest, rpc: Rpc) -> Response:
    """Create a model response (OpenAI ``responses.create``).

    Returns the ``response`` object (:class:`gateway.translate.responses.ResponseHeader`), or with
    ``stream: true`` the typed SSE events of
    :mod:`gateway.translate.responses_stream`. With ``store`` (the default) the response is kept
    before it is returned (or before ``response.completed`` is streamed), so a request that
    names it as ``previous_response_id`` finds it at once.

    Raises:
        GatewayError: 404 ``previous_response_not_found``; 400 for a ``function_call_output``
            that answers no call.
        grpc.aio.AioRpcError: The server refused or failed the request: unknown model 404
            ``model_not_found``, a conversation over the context 400 ``context_length_exceeded``,
            a response over the store's byte bound 400 ``response_too_large`` (see :mod:`gateway.errors`).

    """
    if body.include:
        logger.warning("responses: include not served: %s", unknown_fields_text(body.include))
    rpc = rpc.for_model(body.model)
    chain, chain_bytes = await _previous(rpc, body)
    # Work in proportion to the body and the chain it continues: in a thread when they are large.
    size = len(await rpc.request.body()) + chain_bytes
    message = await off_loop_if_large(size, _translate, body, chain)
    header = translate.ResponseHeader.new(body)

    async def save(response: dict[str, Any]) -> None:
        record = await off_loop_if_large(size, stored_response, header, response, chain)
        put = response_store_pb2.PutStoredResponseRequest(response=record)
        await rpc.unary(rpc.clients.responses.PutStoredResponse, put)

    if body.stream:
        translator = ResponseStreamTranslator(header, save if body.store else None)
        return await rpc.stream_generation(message, translator, translator)
    answer = await rpc.unary(rpc.clients.inference.Generate, message)
    response = translate.response_json(header, answer)
    if body.store:
        await save(response)
    return JsonResponse(response)


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
