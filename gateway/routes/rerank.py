"""``POST /v1/rerank``: Cohere/Jina-style reranking over ``Rerank``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.dependencies import (
    Clients,
    Metadata,
    get_request_id,
)
from gateway.schemas.rerank import RerankRequest
from gateway.streaming import unary_call
from gateway.translate.rerank import rerank_from_proto, to_rerank_request

router = APIRouter(tags=["encoders"])


@router.post("/v1/rerank")
async def rerank(
    body: RerankRequest,
    request: Request,
    clients: Clients,
    metadata: Metadata,
) -> dict[str, Any]:
    """Rank documents by relevance to the query; results sorted best first, with their original index.

    Raises:
        grpc.aio.AioRpcError: The server refused or failed the request (see :mod:`gateway.errors`).

    """
    response = await unary_call(request, clients.inference.Rerank, to_rerank_request(body), metadata)
    return rerank_from_proto(
        response,
        request_id=get_request_id(request),
        requested_model=body.model,
        return_documents=body.return_documents,
    )
