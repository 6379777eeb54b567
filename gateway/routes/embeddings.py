"""``POST /v1/embeddings``: OpenAI embeddings over ``Embed``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.dependencies import Clients, Metadata
from gateway.schemas.embeddings import EmbeddingRequest
from gateway.streaming import unary_call
from gateway.translate.embeddings import embeddings_from_proto, to_embed_request

router = APIRouter(tags=["encoders"])


@router.post("/v1/embeddings")
async def create_embeddings(
    body: EmbeddingRequest,
    request: Request,
    clients: Clients,
    metadata: Metadata,
) -> dict[str, Any]:
    """Embed one or more texts; returns OpenAI's embeddings list (float lists or base64 strings).

    Raises:
        grpc.aio.AioRpcError: The server refused or failed the request (see :mod:`gateway.errors`).

    """
    response = await unary_call(request, clients.inference.Embed, to_embed_request(body), metadata)
    return embeddings_from_proto(response, requested_model=body.model, encoding_format=body.encoding_format)
