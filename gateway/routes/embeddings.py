"""``POST /v1/embeddings``: OpenAI embeddings over ``Embed``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from gateway.dependencies import CallMetadata, get_call_metadata, get_clients
from gateway.grpc_clients import GrpcClients
from gateway.schemas.embeddings import EmbeddingRequest
from gateway.streaming import call_until_disconnect
from gateway.translate.embeddings import embeddings_from_proto, to_embed_request

router = APIRouter(tags=["encoders"])


@router.post("/v1/embeddings")
async def create_embeddings(
    body: EmbeddingRequest,
    request: Request,
    clients: Annotated[GrpcClients, Depends(get_clients)],
    metadata: Annotated[CallMetadata, Depends(get_call_metadata)],
) -> dict[str, Any]:
    """Embed one or more texts; returns OpenAI's embeddings list (float lists or base64 strings).

    Raises:
        grpc.aio.AioRpcError: The server refused or failed the request (see :mod:`gateway.errors`).

    """
    call = clients.inference.Embed(to_embed_request(body), metadata=metadata)
    response = await call_until_disconnect(request, call, call)
    return embeddings_from_proto(response, requested_model=body.model, encoding_format=body.encoding_format)
