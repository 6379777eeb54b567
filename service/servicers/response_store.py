"""ResponseStoreService: the Responses API's stored responses and their creation, over the tasks.

Every call acts for the caller's API key (:func:`_owner`): it stores its responses and sees,
chains from and deletes only those (another key's id is NOT_FOUND).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import KW_ONLY, dataclass
from typing import TypeVar

from universal_runtime.v1 import response_store_pb2 as pb
from universal_runtime.v1 import response_store_pb2_grpc

from service.convert.response_store import (
    create_response,
    put_response,
    response_job,
    stored_response_from_pb,
    stored_response_pb,
    stream_event,
)
from service.core.context import CallContext
from service.request_context import note_model, request_id_var
from service.servicers.inference import INLINE_REQUEST_BYTES, convert_request
from service.settings import Settings
from service.tasks.response_create import ResponseCreateTask, ResponseJob
from service.tasks.response_store import ResponseStoreTask

Context = CallContext
T = TypeVar("T")


def _owner(context: Context) -> str:
    """The key the call acts for: its caller's name (``""`` on a server without keys)."""
    return context.caller.name


@dataclass(eq=False)
class ResponseStoreServicer(response_store_pb2_grpc.ResponseStoreServiceServicer):
    """Implements ``universal_runtime.v1.ResponseStoreService`` over :class:`ResponseStoreTask`.

    Errors (statuses with ``google.rpc.ErrorInfo`` reasons) are listed in
    ``protos/universal_runtime/v1/response_store.proto``.

    Attributes:
        task: the stored responses.
        create: the create workflow (chain, generation, store).
        settings: the request limits a create's ``generate`` is held to (tokens, choices).

    """

    task: ResponseStoreTask
    _: KW_ONLY
    create: ResponseCreateTask
    settings: Settings

    async def PutStoredResponse(self, request: pb.PutStoredResponseRequest, context: Context):
        """Store a new response of the caller's key; ALREADY_EXISTS when that key has one of its id."""
        result = await self.task.put(_owner(context), stored_response_from_pb(request))
        return put_response(result)

    async def GetStoredResponse(self, request: pb.GetStoredResponseRequest, context: Context):
        """One stored response of the caller's key, with the turns of a created one.

        NOT_FOUND when absent, another key's, deleted, evicted or expired.
        """
        response, turns = await self.task.get_with_turns(_owner(context), request.id)
        # A created response's turns are up to UR_RESPONSES_MAX_BYTES of JSON to convert.
        convert = asyncio.to_thread if response.size > INLINE_REQUEST_BYTES else _inline
        return pb.GetStoredResponseResponse(response=await convert(stored_response_pb, response, turns))

    async def DeleteStoredResponse(self, request: pb.DeleteStoredResponseRequest, context: Context):
        """Delete a stored response of the caller's key; NOT_FOUND when absent or another key's."""
        await self.task.delete(_owner(context), request.id)
        return pb.DeleteStoredResponseResponse(id=request.id, deleted=True)

    async def _job(self, request: pb.CreateResponseRequest | pb.CreateResponseStreamRequest) -> ResponseJob:
        job = await convert_request(
            request,
            response_job,
            request_id_var.get(),
            max_tokens_limit=self.settings.max_tokens_limit,
            max_choices=self.settings.max_choices,
        )
        note_model(job.model)
        return job

    async def CreateResponse(
        self, request: pb.CreateResponseRequest, context: Context
    ) -> pb.CreateResponseResponse:
        """Continue ``previous_response_id`` (the caller's), generate; with ``store`` keep the response."""
        job = await self._job(request)
        return create_response(job.model, await self.create.create(_owner(context), job))

    async def CreateResponseStream(
        self, request: pb.CreateResponseStreamRequest, context: Context
    ) -> AsyncIterator[pb.CreateResponseStreamResponse]:
        """CreateResponse streamed: chunks as GenerateStream's, then ``stored`` once the response is kept."""
        job = await self._job(request)
        async for event in self.create.stream(_owner(context), job):
            yield stream_event(job.model, event)


async def _inline(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` on the event loop, awaitable like ``asyncio.to_thread``."""
    return fn(*args)
