"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: the Anthropic Messages API.

A translation onto the same ``Generate`` / ``GenerateStream`` / ``Tokenize`` calls as Chat
Completions (:mod:`gateway.translate.messages`); every error has Anthropic's shape
(:mod:`gateway.anthropic_errors`).
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from gateway.anthropic_errors import ANTHROPIC_SSE, AnthropicRoute
from gateway.calls import Rpc
from gateway.json_body import off_loop_for_body
from gateway.schemas.messages import (
    ANTHROPIC_ERROR_RESPONSES,
    CountTokensRequest,
    MessagesRequest,
    ToolChoiceNone,
)
from gateway.translate import messages

router = APIRouter(tags=["anthropic"], route_class=AnthropicRoute, responses=ANTHROPIC_ERROR_RESPONSES)


def _single_tool_use(body: MessagesRequest) -> bool:
    choice = body.tool_choice
    return choice is not None and not isinstance(choice, ToolChoiceNone) and choice.disable_parallel_tool_use


@router.post("/v1/messages", response_model=None)
async def create_message(body: MessagesRequest, rpc: Rpc) -> Response:
    """Generate the assistant's next message (Anthropic Messages API).

    Returns Anthropic's ``Message`` object, or with ``stream: true`` its server-sent events
    (``message_start`` … ``message_stop``; a failure after the start is an ``error`` event).

    Raises:
        grpc.aio.AioRpcError: The server refused or failed the request (answered in Anthropic's
            shape: unknown model 404 ``not_found_error``, a full queue 529 ``overloaded_error``...).

    """
    rpc = rpc.for_model(body.model)
    single = _single_tool_use(body)
    if body.stream:
        request = await off_loop_for_body(rpc.request, messages.generate_stream_request, body)
        translator = messages.MessageStreamTranslator(requested_model=body.model, single_tool_use=single)
        return await rpc.stream_generation(request, translator, ANTHROPIC_SSE)
    request = await off_loop_for_body(rpc.request, messages.generate_request, body)
    response = await rpc.unary(rpc.clients.inference.Generate, request)
    return JSONResponse(
        messages.message_from_proto(response, requested_model=body.model, single_tool_use=single)
    )


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, rpc: Rpc) -> dict[str, int]:
    """Count the tokens of a prompt: ``{"input_tokens": N}``, as the model's chat template renders it.

    N is what ``/v1/messages`` feeds the model for the same system prompt, messages, tools, tool
    choice and thinking setting (``input_tokens + cache_read_input_tokens`` of its answer),
    counted by ``Tokenize`` with those fields: nothing is generated and no place in the model's
    queue is taken.

    Raises:
        grpc.aio.AioRpcError: 404 ``not_found_error`` for an unknown model, 400 for a model
            without a chat template, 400 for a tool or thinking budget the server refuses (as
            ``/v1/messages`` refuses it); others as :mod:`gateway.anthropic_errors` maps them.

    """
    rpc = rpc.for_model(body.model)
    request = await off_loop_for_body(rpc.request, messages.tokenize_request, body)
    response = await rpc.unary(rpc.clients.inference.Tokenize, request)
    return {"input_tokens": response.count}
