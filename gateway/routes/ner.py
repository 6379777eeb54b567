"""``POST /v1/ner``: named-entity recognition over ``ExtractEntities``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from gateway.dependencies import CallMetadata, get_call_metadata, get_clients
from gateway.grpc_clients import GrpcClients
from gateway.schemas.ner import NerRequest
from gateway.streaming import call_until_disconnect
from gateway.translate.ner import entities_from_proto, to_entities_request

router = APIRouter(tags=["encoders"])


@router.post("/v1/ner")
async def extract_entities(
    body: NerRequest,
    request: Request,
    clients: Annotated[GrpcClients, Depends(get_clients)],
    metadata: Annotated[CallMetadata, Depends(get_call_metadata)],
) -> dict[str, Any]:
    """Find named entities (text, label, code-point offsets, score) in each input.

    Raises:
        grpc.aio.AioRpcError: The server refused or failed the request (see :mod:`gateway.errors`).

    """
    call = clients.inference.ExtractEntities(to_entities_request(body), metadata=metadata)
    response = await call_until_disconnect(request, call, call)
    return entities_from_proto(response, requested_model=body.model)
