"""``POST /v1/rerank``: Cohere/Jina-style reranking over ``Rerank``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gateway.calls import Rpc
from gateway.dependencies import get_request_id
from gateway.schemas.rerank import RerankRequest
from gateway.translate.rerank import rerank_from_proto, to_rerank_request

router = APIRouter(tags=["encoders"])


@router.post("/v1/rerank")
async def rerank(body: RerankRequest, rpc: Rpc) -> dict[str, Any]:
    """Rank documents by relevance to the query; results sorted best first, with their original index.

    Raises:
        grpc.aio.AioRpcError: INVALID_ARGUMENT (400) for an empty query, no, empty or too many
            documents; NOT_FOUND (404) for an unknown model; others as mapped by :mod:`gateway.errors`.

    """
    response = await rpc.unary(rpc.clients.inference.Rerank, to_rerank_request(body))
    return rerank_from_proto(
        response,
        request_id=get_request_id(rpc.request),
        requested_model=body.model,
        return_documents=body.return_documents,
    )
