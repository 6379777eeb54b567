"""``GET /v1/models`` and ``GET /v1/models/{name}`` over ``ModelService``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from universal_runtime.v1 import model_service_pb2

from gateway.calls import Rpc
from gateway.translate.models import model_list_to_openai, model_to_openai

router = APIRouter(tags=["models"])


@router.get("/v1/models")
async def list_models(rpc: Rpc) -> dict[str, Any]:
    """List the catalog as ``{"object": "list", "data": [model, ...]}`` (see ``model_to_openai``).

    Raises:
        grpc.aio.AioRpcError: The server failed the call (see :mod:`gateway.errors`).

    """
    response = await rpc.unary(rpc.clients.models.ListModels, model_service_pb2.ListModelsRequest())
    return model_list_to_openai(response)


# ``:path`` because catalog names may contain slashes (hub ids such as "org/model").
@router.get("/v1/models/{name:path}")
async def get_model(name: str, rpc: Rpc) -> dict[str, Any]:
    """Return one model object.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (HTTP 404, ``model_not_found``) for a name not in the catalog.

    """
    response = await rpc.unary(rpc.clients.models.GetModel, model_service_pb2.GetModelRequest(name=name))
    return model_to_openai(response.model)
