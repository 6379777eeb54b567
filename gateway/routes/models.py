"""``GET /v1/models`` and ``GET /v1/models/{name}`` over ``ModelService``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from universal_runtime.v1 import model_service_pb2

from gateway.calls import Rpc
from gateway.responses import JsonResponse
from gateway.translate.models import model_list_to_openai, model_to_openai

router = APIRouter(tags=["models"])

# The routes return their answers already encoded (gateway.responses): a plain dict would be
# validated against dict[str, Any] and walked by jsonable_encoder on every call. response_model
# keeps the documented shape as it was.
_ANY_OBJECT = dict[str, Any]


@router.get("/v1/models", response_model=_ANY_OBJECT)
async def list_models(rpc: Rpc) -> JsonResponse:
    """List the catalog as ``{"object": "list", "data": [model, ...]}`` (see ``model_to_openai``).

    Raises:
        grpc.aio.AioRpcError: The server failed the call (see :mod:`gateway.errors`).

    """
    response = await rpc.unary(rpc.clients.models.ListModels, model_service_pb2.ListModelsRequest())
    return JsonResponse(model_list_to_openai(response))


# ``:path`` because catalog names may contain slashes (hub ids such as "org/model").
@router.get("/v1/models/{name:path}", response_model=_ANY_OBJECT)
async def get_model(name: str, rpc: Rpc) -> JsonResponse:
    """Return one model object.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (HTTP 404, ``model_not_found``) for a name not in the catalog.

    """
    response = await rpc.unary(rpc.clients.models.GetModel, model_service_pb2.GetModelRequest(name=name))
    return JsonResponse(model_to_openai(response.model))
