"""Rerank routes over ``Rerank``, in the shapes reranking clients send.

``POST /v1/rerank`` and ``POST /rerank`` answer the Jina / vLLM / Cohere v1 shape, ``POST /v2/rerank``
Cohere's v2 shape. The three take the same body (:class:`gateway.schemas.rerank.RerankRequest`)
and make the same call; only the answer's shape differs (see :mod:`gateway.translate.rerank`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from universal_runtime.v1 import encoders_pb2

from gateway.calls import CallSite, Rpc
from gateway.json_body import JsonBodyRoute
from gateway.schemas.rerank import RerankRequest
from gateway.translate.rerank import cohere_v2_rerank_from_proto, rerank_from_proto, to_rerank_request

router = APIRouter(tags=["encoders"], route_class=JsonBodyRoute)


async def _rerank(site: CallSite, body: RerankRequest) -> encoders_pb2.RerankResponse:
    return await site.unary(site.clients.inference.Rerank, to_rerank_request(body))


async def answer_rerank(site: CallSite, body: RerankRequest) -> dict[str, Any]:
    """The answer of :func:`rerank` (``/v1/rerank``) to ``body``, its call made at ``site``.

    Raises:
        GatewayError: The site's own bound ended the call (499: the HTTP client left).
        grpc.aio.AioRpcError: As :func:`rerank`.

    """
    response = await _rerank(site, body)
    return rerank_from_proto(
        response,
        request_id=site.request_id,
        requested_model=body.model,
        return_documents=body.return_documents,
    )


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
    return await answer_rerank(rpc, body)


@router.post("/v2/rerank")
async def rerank_v2(body: RerankRequest, rpc: Rpc) -> dict[str, Any]:
    """Rank documents like ``/v1/rerank``, answering Cohere's v2 shape: ``id``, ``results``, ``meta``.

    Raises:
        grpc.aio.AioRpcError: As ``/v1/rerank``.

    """
    response = await _rerank(rpc, body)
    return cohere_v2_rerank_from_proto(
        response, request_id=rpc.request_id, return_documents=body.return_documents
    )
