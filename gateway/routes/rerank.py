"""``POST /v1/rerank``: Cohere/Jina-style reranking over ``Rerank``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from gateway.dependencies import CallMetadata, get_call_metadata, get_clients, get_request_id
from gateway.grpc_clients import GrpcClients
from gateway.schemas.rerank import RerankRequest
from gateway.streaming import call_until_disconnect
from gateway.translate.rerank import rerank_from_proto, to_rerank_request

router = APIRouter(tags=["encoders"])


@router.post("/v1/rerank")
async def rerank(
    body: RerankRequest,
    request: Request,
    clients: Annotated[GrpcClients, Depends(get_clients)],
    metadata: Annotated[CallMetadata, Depends(get_call_metadata)],
) -> dict[str, Any]:
    """Rank documents by relevance to the query; results sorted best first, with their original index.

    Raises:
        grpc.aio.AioRpcError: The server refused or failed the request (see :mod:`gateway.errors`).

    """
    call = clients.inference.Rerank(to_rerank_request(body), metadata=metadata)
    response = await call_until_disconnect(request, call, call)
    return rerank_from_proto(
        response,
        request_id=get_request_id(request),
        requested_model=body.model,
        return_documents=body.return_documents,
    )
