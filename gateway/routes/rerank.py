"""Rerank routes over ``Rerank``, in the shapes reranking clients send.

``POST /v1/rerank`` and ``POST /rerank`` answer the Jina / vLLM / Cohere v1 shape, ``POST /v2/rerank``
Cohere's v2 shape. The three take the same body (:class:`gateway.schemas.rerank.RerankRequest`)
and make the same call; only the answer's shape differs (see :mod:`gateway.translate.rerank`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from universal_runtime.v1 import encoders_pb2

from gateway.calls import Rpc
from gateway.dependencies import get_request_id
from gateway.json_body import JsonBodyRoute
from gateway.schemas.rerank import RerankRequest
from gateway.translate.rerank import cohere_v2_rerank_from_proto, rerank_from_proto, to_rerank_request

router = APIRouter(tags=["encoders"], route_class=JsonBodyRoute)


async def _rerank(body: RerankRequest, rpc: Rpc) -> encoders_pb2.RerankResponse:
    return await rpc.unary(rpc.clients.inference.Rerank, to_rerank_request(body))


# vLLM serves the same handler at /rerank (where LiteLLM's hosted_vllm provider posts) and /v1/rerank.
@router.post("/v1/rerank")
@router.post("/rerank")
async def rerank(body: RerankRequest, rpc: Rpc) -> dict[str, Any]:
    """Rank documents by relevance to the query; results sorted best first, with their original index.

    Answers the Jina / vLLM / Cohere v1 shape: ``id``, ``model``, ``results``, ``usage``, ``meta``.

    Raises:
        grpc.aio.AioRpcError: INVALID_ARGUMENT (400) for an empty query, no, empty or too many
            documents; NOT_FOUND (404) for an unknown model; FAILED_PRECONDITION (400) for a model
            without the rerank task; others as mapped by :mod:`gateway.errors`.

    """
    response = await _rerank(body, rpc)
    return rerank_from_proto(
        response,
        request_id=get_request_id(rpc.request),
        requested_model=body.model,
        return_documents=body.return_documents,
    )


@router.post("/v2/rerank")
async def rerank_v2(body: RerankRequest, rpc: Rpc) -> dict[str, Any]:
    """Rank documents like ``/v1/rerank``, answering Cohere's v2 shape: ``id``, ``results``, ``meta``.

    Raises:
        grpc.aio.AioRpcError: As ``/v1/rerank``.

    """
    response = await _rerank(body, rpc)
    return cohere_v2_rerank_from_proto(
        response, request_id=get_request_id(rpc.request), return_documents=body.return_documents
    )
