"""Rerank: Cohere/Jina/vLLM rerank request to ``RerankRequest``, ``RerankResponse`` to their shapes.

``/v1/rerank`` and ``/rerank`` answer one shape that Jina's, vLLM's and Cohere v1's clients all
read (each takes the fields it knows)::

    {"id": str, "model": str,
     "results": [{"index": int, "relevance_score": float, "document": {"text": str}?}],
     "usage": {"prompt_tokens": int, "total_tokens": int},
     "meta": {"billed_units": {"search_units": 1}}}

``/v2/rerank`` answers Cohere v2's shape: no ``model`` or ``usage``; the token count is in
``meta.tokens``::

    {"id": str, "results": [...as above...],
     "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1},
              "tokens": {"input_tokens": int, "output_tokens": 0}}}
"""

from __future__ import annotations

from typing import Any

from universal_runtime.v1 import encoders_pb2

from gateway.schemas.rerank import RerankRequest
from gateway.translate.common import BodyFields
from gateway.translate.encoders import TRUNCATION_POLICIES, usage_json

_RERANK = BodyFields(
    RerankRequest,
    encoders_pb2.RerankRequest,
    ("model", "query", "top_n", "return_documents"),
    by_hand=("documents", "truncation", "keep_alive"),
)


def to_rerank_request(request: RerankRequest) -> encoders_pb2.RerankRequest:
    """Convert the HTTP body to ``RerankRequest``."""
    return encoders_pb2.RerankRequest(
        **_RERANK.values(request),
        documents=request.document_texts,
        truncation=TRUNCATION_POLICIES[request.truncation],
        keep_alive=request.keep_alive_value,
    )


def _results_json(response: encoders_pb2.RerankResponse, return_documents: bool) -> list[dict[str, Any]]:
    """The ``results`` list, best first, every item with ``index`` and ``relevance_score``."""
    results = []
    for item in response.results:
        result: dict[str, Any] = {"index": item.index, "relevance_score": item.relevance_score}
        if return_documents:
            result["document"] = {"text": item.document}
        results.append(result)
    return results


def rerank_from_proto(
    response: encoders_pb2.RerankResponse, *, request_id: str, requested_model: str, return_documents: bool
) -> dict[str, Any]:
    """Convert ``RerankResponse`` to the Jina/vLLM/Cohere v1 JSON shape (``document`` only when asked for)."""
    return {
        "id": request_id,
        "model": response.model or requested_model,
        "results": _results_json(response, return_documents),
        "usage": usage_json(response.usage),
        "meta": {"billed_units": {"search_units": 1}},
    }


def cohere_v2_rerank_from_proto(
    response: encoders_pb2.RerankResponse, *, request_id: str, return_documents: bool
) -> dict[str, Any]:
    """Convert ``RerankResponse`` to Cohere's v2 JSON shape (``document`` only when asked for)."""
    return {
        "id": request_id,
        "results": _results_json(response, return_documents),
        "meta": {
            "api_version": {"version": "2"},
            "billed_units": {"search_units": 1},
            "tokens": {"input_tokens": response.usage.prompt_tokens, "output_tokens": 0},
        },
    }
