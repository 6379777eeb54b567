"""``POST /v1/completions``: OpenAI legacy completions over ``Generate`` / ``GenerateStream``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from gateway.calls import Rpc, generate
from gateway.json_body import JsonBodyRoute
from gateway.schemas.completions import CompletionRequest
from gateway.translate import completions

router = APIRouter(tags=["generation"], route_class=JsonBodyRoute)


@router.post("/v1/completions", response_model=None)
async def create_completion(body: CompletionRequest, rpc: Rpc) -> Response:
    """Complete a raw prompt.

    Returns a ``text_completion`` JSON object, or with ``stream: true`` an SSE stream of
    ``text_completion`` chunks ending with ``data: [DONE]``.

    Raises:
        grpc.aio.AioRpcError: The server refused or failed the request (see :mod:`gateway.errors`).

    """
    return await generate(rpc, body, completions.API)
