"""The Batch API's batches: ``POST|GET /v1/batches``, ``GET /v1/batches/{batch_id}``, ``POST .../cancel``.

Each is a call to the server's ``BatchService``, which checks the input, runs the lines (through
the gateway's own routes, at ``batch`` priority, under the key that created the batch) and keeps
the batch's state durably; answered in OpenAI's shapes
(https://platform.openai.com/docs/api-reference/batch). A key sees only its own batches: another
key's id is 404, as an absent one.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from universal_runtime.v1 import batch_pb2

from gateway.calls import Rpc
from gateway.json_body import JsonBodyRoute
from gateway.responses import JsonResponse
from gateway.schemas.batches import (
    DEFAULT_BATCHES_PAGE,
    MAX_BATCHES_PAGE,
    MAX_ID_CHARS,
    BatchList,
    BatchObject,
    CreateBatchRequest,
)
from gateway.translate.batches import batch_object, list_object

router = APIRouter(tags=["batches"], route_class=JsonBodyRoute)

BatchId = Annotated[str, Path(max_length=MAX_ID_CHARS)]


@router.post("/v1/batches", response_model=BatchObject)
async def create_batch(body: CreateBatchRequest, rpc: Rpc) -> JsonResponse:
    """Create a batch over an uploaded file (OpenAI ``batches.create``); it starts ``validating``.

    ``output_expires_after`` (``{"anchor": "created_at", "seconds": 3600 to 2592000}``) is how
    long its output and error files are kept after they are written; 30 days without it (a bad
    one is a 400 of the body's validation, ``param`` naming the field).

    Raises:
        grpc.aio.AioRpcError: 404 ``file_not_found``; 400 ``invalid_batch_endpoint``,
            ``input_file_not_batch`` (a file of another purpose), ``invalid_batch_metadata``
            (see :mod:`gateway.errors`).

    """
    request = batch_pb2.CreateBatchRequest(
        input_file_id=body.input_file_id,
        endpoint=body.endpoint,
        completion_window=body.completion_window,
        metadata=body.metadata or {},
        output_expires_after_seconds=body.output_expires_after.seconds if body.output_expires_after else 0,
    )
    reply = await rpc.unary(rpc.clients.batches.CreateBatch, request)
    return JsonResponse(batch_object(reply.batch))


@router.get("/v1/batches", response_model=BatchList)
async def list_batches(
    rpc: Rpc,
    after: Annotated[str | None, Query(max_length=MAX_ID_CHARS)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_BATCHES_PAGE)] = DEFAULT_BATCHES_PAGE,
) -> JsonResponse:
    """The key's batches (OpenAI ``batches.list``), newest first: ``limit`` (1-100) after ``after``.

    Raises:
        grpc.aio.AioRpcError: 400 ``invalid_pagination`` for an ``after`` that names no batch of the key.

    """
    request = batch_pb2.ListBatchesRequest(after=after or "", limit=limit)
    reply = await rpc.unary(rpc.clients.batches.ListBatches, request)
    return JsonResponse(list_object([batch_object(batch) for batch in reply.data], reply))


@router.get("/v1/batches/{batch_id}", response_model=BatchObject)
async def get_batch(batch_id: BatchId, rpc: Rpc) -> JsonResponse:
    """One batch (OpenAI ``batches.retrieve``): status, request counts, output and error file ids.

    Raises:
        grpc.aio.AioRpcError: 404 ``batch_not_found`` (absent or another key's), 400 ``invalid_batch_id``.

    """
    reply = await rpc.unary(rpc.clients.batches.GetBatch, batch_pb2.GetBatchRequest(id=batch_id))
    return JsonResponse(batch_object(reply.batch))


@router.post("/v1/batches/{batch_id}/cancel", response_model=BatchObject)
async def cancel_batch(batch_id: BatchId, rpc: Rpc) -> JsonResponse:
    """Cancel a batch (OpenAI ``batches.cancel``): ``cancelling`` while its lines finish, then ``cancelled``.

    Raises:
        grpc.aio.AioRpcError: 404 ``batch_not_found``; 400 ``batch_not_cancellable`` (it already ended).

    """
    reply = await rpc.unary(rpc.clients.batches.CancelBatch, batch_pb2.CancelBatchRequest(id=batch_id))
    return JsonResponse(batch_object(reply.batch))
