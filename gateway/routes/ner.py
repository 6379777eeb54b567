"""``POST /v1/ner``: named-entity recognition over ``ExtractEntities``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gateway.calls import Rpc
from gateway.json_body import JsonBodyRoute
from gateway.schemas.ner import NerRequest
from gateway.translate.ner import entities_from_proto, to_entities_request

router = APIRouter(tags=["encoders"], route_class=JsonBodyRoute)


@router.post("/v1/ner")
async def extract_entities(body: NerRequest, rpc: Rpc) -> dict[str, Any]:
    """Find named entities (text, label, code-point offsets, score) in each input.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (404) for an unknown model; FAILED_PRECONDITION (400,
            ``task_not_supported``) for a model that does not find entities; INVALID_ARGUMENT (400)
            for empty or too many inputs; others as mapped by :mod:`gateway.errors`.

    """
    response = await rpc.unary(rpc.clients.inference.ExtractEntities, to_entities_request(body))
    return entities_from_proto(response, requested_model=body.model)
