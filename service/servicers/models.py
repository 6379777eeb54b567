"""ModelService: list, inspect, load, unload and watch models.

Listing and watching are every key's; loading and unloading (LoadModel, UnloadModel, WatchModel
with ``load``) need role admin when the server has keys
(:func:`service.tasks.callers.require_admin`: PERMISSION_DENIED, reason ADMIN_ROLE_REQUIRED),
checked before the request's fields, so a user key learns nothing from them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from universal_runtime.v1 import model_service_pb2 as pb
from universal_runtime.v1 import model_service_pb2_grpc

from service.convert.models import TASKS_BY_PB, estimate_memory, load_options, model_message
from service.convert.validation import require
from service.core.context import CallContext
from service.keep_alive import parse_keep_alive
from service.model_manager import WATCH_MAX_S, ManagedModel, ModelManager, ModelState, WatchTooLongError
from service.request_context import note_model
from service.tasks.callers import require_admin


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    """Implements ``universal_runtime.v1.ModelService`` over the model manager."""

    def __init__(self, manager: ModelManager) -> None:
        self._manager = manager

    async def ListModels(self, request: pb.ListModelsRequest, context: CallContext):
        """All catalog models, optionally filtered by task and by being loaded."""
        task = TASKS_BY_PB.get(request.task)
        require(request.task == pb.TASK_UNSPECIFIED or task is not None, "task", "unknown task")
        chosen = [
            m
            for m in self._manager.models()
            if (task is None or task in m.spec.tasks)
            and (not request.loaded_only or m.state is ModelState.READY)
        ]
        # The ones not estimated yet, together (in worker threads; the manager caches each).
        await asyncio.gather(*(estimate_memory(self._manager, m) for m in chosen if m.required is None))
        return pb.ListModelsResponse(models=[model_message(self._manager, m) for m in chosen])

    async def GetModel(self, request: pb.GetModelRequest, context: CallContext):
        """One model's state; NOT_FOUND for names outside the catalog."""
        require(bool(request.name), "name", "must be set")
        note_model(request.name)
        managed = self._manager.get(request.name)
        if managed.required is None:
            await estimate_memory(self._manager, managed)
        return pb.GetModelResponse(model=model_message(self._manager, managed))

    async def LoadModel(self, request: pb.LoadModelRequest, context: CallContext):
        """Load (idempotent) and optionally set keep-alive, pinning and option overrides for this load.

        Raises:
            PermissionDeniedError: a key without role admin (ADMIN_ROLE_REQUIRED).

        """
        require_admin("LoadModel")
        require(bool(request.name), "name", "must be set")
        note_model(request.name)
        pinned = request.pinned if request.HasField("pinned") else None
        options = load_options(request)
        managed = await self._manager.load(request.name, request.keep_alive or None, pinned, options)
        return pb.LoadModelResponse(model=model_message(self._manager, managed))

    async def UnloadModel(self, request: pb.UnloadModelRequest, context: CallContext):
        """Unload once in-flight requests finish.

        Raises:
            PermissionDeniedError: a key without role admin (ADMIN_ROLE_REQUIRED).

        """
        require_admin("UnloadModel")
        require(bool(request.name), "name", "must be set")
        note_model(request.name)
        managed = await self._manager.unload(request.name, force=request.force)
        return pb.UnloadModelResponse(model=model_message(self._manager, managed))

    async def WatchModel(
        self, request: pb.WatchModelRequest, context: CallContext
    ) -> AsyncIterator[pb.WatchModelResponse]:
        """Stream the model at once and on each change of its status, until it settles.

        Settled: ready, error, or not loaded with no load under way. With ``load``, the load
        starts first (as LoadModel's, with its keep_alive, pinned and options); when it fails,
        the stream ends with the status LoadModel would give, after the message that shows the
        model's ``Error: <why>``. The load runs on when the client goes away: other callers may
        be waiting for it too.

        Bounds: the client's deadline ends the stream (grpc cancels it); the server ends it after
        :data:`~service.model_manager.WATCH_MAX_S` (one hour) with DEADLINE_EXCEEDED, reason
        WATCH_TOO_LONG, when the model has not settled by then.

        Raises:
            PermissionDeniedError: ``load`` from a key without role admin (ADMIN_ROLE_REQUIRED).
            InvalidArgumentError: no name, a malformed name, or bad LoadModel fields (options
                over their limits, an invalid keep_alive or option).
            ModelNotFoundError: the name is not in the catalog.
            Otherwise what LoadModel raises, for a load this call started.

        """
        if request.load:
            require_admin("WatchModel with load")
        require(bool(request.name), "name", "must be set")
        note_model(request.name)
        managed = self._manager.get(request.name)
        loading = self._start_load(request) if request.load else None
        if loading is None:
            await estimate_memory(self._manager, managed)  # a load computes its own, for its options
        sent = pb.Model()
        async for model in self._manager.watch(request.name, loading):
            sent = model_message(self._manager, model)
            yield pb.WatchModelResponse(model=sent)
        # The watch ends once the model settles, or at the manager's limit (WATCH_MAX_S).
        if loading is not None and loading.done():
            # The load's error, as LoadModel's; or the model as LoadModel returns it, when its
            # keep-alive or pinning changed after the last status change.
            final = model_message(self._manager, loading.result())
            if _differs(final, sent):
                yield pb.WatchModelResponse(model=final)
        elif loading is not None or not managed.settled:
            message = (
                f"watched model {request.name!r} for {WATCH_MAX_S:.0f} s, the longest one stream may last; "
                "watch again"
            )
            raise WatchTooLongError(message, model=request.name, limit_s=f"{WATCH_MAX_S:.0f}")

    def _start_load(self, request: pb.WatchModelRequest) -> asyncio.Future[ManagedModel]:
        """Start WatchModel's load in the background; the returned future has its outcome.

        The request's fields are checked first, so a bad one fails the call before any message.

        Raises:
            InvalidArgumentError: an invalid keep_alive, or options over their limits (see
                :func:`load_options`).

        """
        if request.keep_alive:
            parse_keep_alive(request.keep_alive)  # the load parses it again; refused here before any message
        pinned = request.pinned if request.HasField("pinned") else None
        options = load_options(request)
        load = asyncio.ensure_future(
            self._manager.load(request.name, request.keep_alive or None, pinned, options)
        )
        # Awaited by the watch that started it; when the client left first, read here so its
        # failure (already the model's status and log line) is not reported as never retrieved.
        load.add_done_callback(_drop_outcome)
        self._manager.spawn(load)  # the manager's close waits for it
        return load


def _differs(model: pb.Model, sent: pb.Model) -> bool:
    """Whether ``model`` says more than ``sent`` did: any field but the expiry, which moves with the clock."""
    unchanged = pb.Model()
    unchanged.CopyFrom(sent)
    unchanged.expires_at_unix_ms = model.expires_at_unix_ms
    return model != unchanged


def _drop_outcome(load: asyncio.Future[ManagedModel]) -> None:
    if not load.cancelled():
        load.exception()
