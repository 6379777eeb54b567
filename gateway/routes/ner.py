"""``POST /v1/ner``: named-entity recognition over ``ExtractEntities``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.dependencies import Clients, Metadata
from gateway.schemas.ner import NerRequest
from gateway.streaming import unary_call
from gateway.translate.ner import entities_from_proto, to_entities_request

router = APIRouter(tags=["encoders"])


@router.post("/v1/ner")
async def extract_entities(
    body: NerRequest,
    request: Request,
    clients: Clients,
    metadata: Metadata,
) -> dict[str, Any]:
    """Find named entities (text, label, code-point offsets, score) in each input.

    Raises:
        grpc.aio.AioRpcError: The server refused or failed the request (see :mod:`gateway.errors`).

    """
    response = await unary_call(
        request, clients.inference.ExtractEntities, to_entities_request(body), metadata
    )
    return entities_from_proto(response, requested_model=body.model)
