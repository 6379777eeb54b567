"""``POST /v1/chat/completions``: OpenAI chat completions over ``Generate`` / ``GenerateStream``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from gateway.calls import Rpc, generate
from gateway.json_body import JsonBodyRoute
from gateway.schemas.chat import ChatCompletionRequest
from gateway.translate import chat

router = APIRouter(tags=["generation"], route_class=JsonBodyRoute)


@router.post("/v1/chat/completions", response_model=None)
async def create_chat_completion(body: ChatCompletionRequest, rpc: Rpc) -> Response:
    """Generate a chat completion.

    Returns a ``chat.completion`` JSON object, or with ``stream: true`` an SSE stream of
    ``chat.completion.chunk`` objects ending with ``data: [DONE]``.

    Raises:
        grpc.aio.AioRpcError: The server refused or failed the request (rendered as an OpenAI
            error with the matching HTTP status by :mod:`gateway.errors`).

    """
    return await generate(rpc, body, chat.API)
