"""``POST /v1/chat/completions``: OpenAI chat completions over ``Generate`` / ``GenerateStream``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from gateway.dependencies import CallMetadata, get_call_metadata, get_clients
from gateway.grpc_clients import GrpcClients
from gateway.schemas.chat import ChatCompletionRequest
from gateway.streaming import call_until_disconnect, stream_generation
from gateway.translate import chat

router = APIRouter(tags=["generation"])


@router.post("/v1/chat/completions", response_model=None)
async def create_chat_completion(
    body: ChatCompletionRequest,
    request: Request,
    clients: Annotated[GrpcClients, Depends(get_clients)],
    metadata: Annotated[CallMetadata, Depends(get_call_metadata)],
) -> Response:
    """Generate a chat completion.

    Returns a ``chat.completion`` JSON object, or with ``stream: true`` an SSE stream of
    ``chat.completion.chunk`` objects ending with ``data: [DONE]``.

    Raises:
        grpc.aio.AioRpcError: The server refused or failed the request (rendered as an OpenAI
            error with the matching HTTP status by :mod:`gateway.errors`).

    """
    if body.stream:
        stream_request = chat.to_generate_stream_request(body)
        translator = chat.ChatStreamTranslator(requested_model=body.model, include_usage=body.include_usage)
        return await stream_generation(
            request, lambda: clients.inference.GenerateStream(stream_request, metadata=metadata), translator
        )
    call = clients.inference.Generate(chat.to_generate_request(body), metadata=metadata)
    response = await call_until_disconnect(request, call, call)
    return JSONResponse(chat.chat_completion_from_proto(response, requested_model=body.model))
