"""``POST /v1/embeddings``: OpenAI embeddings over ``Embed``."""

from __future__ import annotations

from fastapi import APIRouter, Request

from gateway.dependencies import Clients, Metadata
from gateway.schemas.embeddings import EmbeddingRequest, EmbeddingResponse
from gateway.streaming import unary_call
from gateway.translate.embeddings import embeddings_from_proto, to_embed_request

router = APIRouter(tags=["encoders"])


@router.post("/v1/embeddings")
async def create_embeddings(
    body: EmbeddingRequest,
    request: Request,
    clients: Clients,
    metadata: Metadata,
) -> EmbeddingResponse:
    """Embed one or more texts; returns OpenAI's embeddings list (float lists or base64 strings).

    Raises:
        grpc.aio.AioRpcError: The server refused or failed the request (see :mod:`gateway.errors`).

    """
    response = await unary_call(request, clients.inference.Embed, to_embed_request(body), metadata)
    # A typed return lets FastAPI serialize with pydantic-core (fast for long float lists).
    return EmbeddingResponse.model_validate(
        embeddings_from_proto(response, requested_model=body.model, encoding_format=body.encoding_format)
    )
