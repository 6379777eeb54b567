"""ResponseStoreService: the Responses API's stored responses (put, get, delete), over the task.

Every call acts for the caller's API key (:func:`service.tasks.callers.call_owner`): it stores its
responses and sees, chains from and deletes only those (another key's id is NOT_FOUND).
"""

from __future__ import annotations

import grpc
from universal_runtime.v1 import response_store_pb2 as pb
from universal_runtime.v1 import response_store_pb2_grpc

from service.convert.response_store import put_response, stored_response_from_pb, stored_response_pb
from service.tasks.callers import call_owner
from service.tasks.response_store import ResponseStoreTask


class ResponseStoreServicer(response_store_pb2_grpc.ResponseStoreServiceServicer):
    """Implements ``universal_runtime.v1.ResponseStoreService`` over :class:`ResponseStoreTask`.

    Errors (statuses with ``google.rpc.ErrorInfo`` reasons) are listed in
    ``protos/universal_runtime/v1/response_store.proto``.
    """

    def __init__(self, task: ResponseStoreTask) -> None:
        self._task = task

    async def PutStoredResponse(
        self, request: pb.PutStoredResponseRequest, context: grpc.aio.ServicerContext
    ):
        """Store a new response of the caller's key; ALREADY_EXISTS when that key has one of its id."""
        result = await self._task.put(call_owner(), stored_response_from_pb(request))
        return put_response(result)

    async def GetStoredResponse(
        self, request: pb.GetStoredResponseRequest, context: grpc.aio.ServicerContext
    ):
        """One stored response of the caller's key.

        NOT_FOUND when absent, another key's, deleted, evicted or expired.
        """
        response = await self._task.get(call_owner(), request.id)
        return pb.GetStoredResponseResponse(response=stored_response_pb(response))

    async def DeleteStoredResponse(
        self, request: pb.DeleteStoredResponseRequest, context: grpc.aio.ServicerContext
    ):
        """Delete a stored response of the caller's key; NOT_FOUND when absent or another key's."""
        await self._task.delete(call_owner(), request.id)
        return pb.DeleteStoredResponseResponse(id=request.id, deleted=True)
