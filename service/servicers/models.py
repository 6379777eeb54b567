"""ModelService: list, inspect, load and unload models."""

from __future__ import annotations

import grpc
from universal_runtime.v1 import model_service_pb2 as pb
from universal_runtime.v1 import model_service_pb2_grpc

from service.convert.models import TASKS_BY_PB, load_options, model_message
from service.convert.validation import require
from service.model_manager import ModelManager, ModelState
from service.request_context import note_model


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    """Implements ``universal_runtime.v1.ModelService`` over the model manager."""

    def __init__(self, manager: ModelManager) -> None:
        self._manager = manager

    async def ListModels(self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext):
        """All catalog models, optionally filtered by task and by being loaded."""
        task = TASKS_BY_PB.get(request.task)
        require(request.task == pb.TASK_UNSPECIFIED or task is not None, "task", "unknown task")
        models = [
            model_message(self._manager, m)
            for m in self._manager.models()
            if (task is None or task in m.spec.tasks)
            and (not request.loaded_only or m.state is ModelState.READY)
        ]
        return pb.ListModelsResponse(models=models)

    async def GetModel(self, request: pb.GetModelRequest, context: grpc.aio.ServicerContext):
        """One model's state; NOT_FOUND for names outside the catalog."""
        require(bool(request.name), "name", "must be set")
        note_model(request.name)
        return pb.GetModelResponse(model=model_message(self._manager, self._manager.get(request.name)))

    async def LoadModel(self, request: pb.LoadModelRequest, context: grpc.aio.ServicerContext):
        """Load (idempotent) and optionally set keep-alive, pinning and option overrides for this load."""
        require(bool(request.name), "name", "must be set")
        note_model(request.name)
        pinned = request.pinned if request.HasField("pinned") else None
        options = load_options(request)
        managed = await self._manager.load(request.name, request.keep_alive or None, pinned, options)
        return pb.LoadModelResponse(model=model_message(self._manager, managed))

    async def UnloadModel(self, request: pb.UnloadModelRequest, context: grpc.aio.ServicerContext):
        """Unload once in-flight requests finish."""
        require(bool(request.name), "name", "must be set")
        note_model(request.name)
        managed = await self._manager.unload(request.name, force=request.force)
        return pb.UnloadModelResponse(model=model_message(self._manager, managed))
