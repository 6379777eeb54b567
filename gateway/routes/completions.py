"""``POST /v1/completions``: OpenAI legacy completions over ``Generate`` / ``GenerateStream``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from gateway.dependencies import CallMetadata, get_call_metadata, get_clients
from gateway.grpc_clients import GrpcClients
from gateway.schemas.completions import CompletionRequest
from gateway.streaming import call_until_disconnect, stream_generation
from gateway.translate import completions

router = APIRouter(tags=["generation"])


@router.post("/v1/completions", response_model=None)
async def create_completion(
    body: CompletionRequest,
    request: Request,
    clients: Annotated[GrpcClients, Depends(get_clients)],
    metadata: Annotated[CallMetadata, Depends(get_call_metadata)],
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
    call = clients.inference.Generate(completions.to_generate_request(body), metadata=metadata)
    response = await call_until_disconnect(request, call, call)
    return JSONResponse(completions.completion_from_proto(response, requested_model=body.model))
