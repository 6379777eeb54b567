"""``POST /v1/chat/completions``: OpenAI chat completions over ``Generate`` / ``GenerateStream``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from gateway.dependencies import Clients, Metadata
from gateway.schemas.chat import ChatCompletionRequest
from gateway.streaming import stream_generation, unary_call
from gateway.translate import chat

router = APIRouter(tags=["generation"])


@router.post("/v1/chat/completions", response_model=None)
async def create_chat_completion(
    body: ChatCompletionRequest,
    request: Request,
    clients: Clients,
    metadata: Metadata,
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
    response = await unary_call(request, clients.inference.Generate, chat.to_generate_request(body), metadata)
    return JSONResponse(chat.chat_completion_from_proto(response, requested_model=body.model))
