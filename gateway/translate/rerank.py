"""Rerank: Cohere/Jina rerank request to ``RerankRequest``, ``RerankResponse`` to their response shape.

Response shape (the fields Cohere's and Jina's clients read)::

    {"id": str, "model": str,
     "results": [{"index": int, "relevance_score": float, "document": {"text": str}?}],
     "usage": {"prompt_tokens": int, "total_tokens": int},
     "meta": {"billed_units": {"search_units": 1}}}
"""

from __future__ import annotations

from typing import Any

from universal_runtime.v1 import encoders_pb2

from gateway.schemas.rerank import RerankRequest
from gateway.translate.embeddings import TRUNCATION_POLICIES


def to_rerank_request(request: RerankRequest) -> encoders_pb2.RerankRequest:
    """Convert the HTTP body to ``RerankRequest``."""
    return encoders_pb2.RerankRequest(
        model=request.model,
        query=request.query,
        documents=request.document_texts,
        top_n=request.top_n or 0,
        return_documents=request.return_documents,
        truncation=TRUNCATION_POLICIES[request.truncation],
        keep_alive=request.keep_alive_value,
    )


def rerank_from_proto(
    response: encoders_pb2.RerankResponse, *, request_id: str, requested_model: str, return_documents: bool
) -> dict[str, Any]:
    """Convert ``RerankResponse`` to the Cohere/Jina JSON shape (``document`` only when asked for)."""
    results = []
    for item in response.results:
        result: dict[str, Any] = {"index": item.index, "relevance_score": item.relevance_score}
        if return_documents:
            result["document"] = {"text": item.document}
        results.append(result)
    return {
        "id": request_id,
        "model": response.model or requested_model,
        "results": results,
        "usage": {"prompt_tokens": response.usage.prompt_tokens, "total_tokens": response.usage.total_tokens},
        "meta": {"billed_units": {"search_units": 1}},
    }
