"""``POST /v1/completions``: OpenAI legacy completions over ``Generate`` / ``GenerateStream``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from gateway.dependencies import Clients, Metadata
from gateway.schemas.completions import CompletionRequest
from gateway.streaming import stream_generation, unary_call
from gateway.translate import completions

router = APIRouter(tags=["generation"])


@router.post("/v1/completions", response_model=None)
async def create_completion(
    body: CompletionRequest,
    request: Request,
    clients: Clients,
    metadata: Metadata,
) -> Response:
    """Complete a raw prompt.

    Returns a ``text_completion`` JSON object, or with ``stream: true`` an SSE stream of
    ``text_completion`` chunks ending with ``data: [DONE]``.

    Raises:
        grpc.aio.AioRpcError: The server refused or failed the request (see :mod:`gateway.errors`).

    """
    if body.stream:
        stream_request = completions.to_generate_stream_request(body)
        translator = completions.CompletionStreamTranslator(
            requested_model=body.model, include_usage=body.include_usage
        )
        return await stream_generation(
            request, lambda: clients.inference.GenerateStream(stream_request, metadata=metadata), translator
        )
    response = await unary_call(
        request, clients.inference.Generate, completions.to_generate_request(body), metadata
    )
    return JSONResponse(completions.completion_from_proto(response, requested_model=body.model))
