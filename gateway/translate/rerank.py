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
from gateway.translate.common import set_fields
from gateway.translate.encoders import TRUNCATION_POLICIES, usage_json


def to_rerank_request(request: RerankRequest) -> encoders_pb2.RerankRequest:
    """Convert the HTTP body to ``RerankRequest``."""
    return encoders_pb2.RerankRequest(
        **set_fields(request, "model", "query", "top_n", "return_documents"),
        documents=request.document_texts,
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
        "usage": usage_json(response.usage),
        "meta": {"billed_units": {"search_units": 1}},
    }
