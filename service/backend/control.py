"""BackendService: the server's control of the backend (Load, Unload, Health, Stats)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable

import grpc
from universal_runtime.v1 import backend_service_pb2 as pb
from universal_runtime.v1 import backend_service_pb2_grpc, model_service_pb2

from engines.base import ModelSpec
from engines.errors import InvalidArgumentError
from engines.types import MemoryUsage, Task
from service.backend.calls import unary_rpc
from service.backend.model import BackendModel
from service.request_context import note_model

SERVICE = "universal_runtime.v1.BackendService"


def model_spec(request: pb.LoadRequest) -> ModelSpec:
    """The catalog entry a LoadRequest names, as the server resolved it.

    Args:
        request: ``model`` and ``backend`` (required), ``tasks`` (catalog spellings), ``source``,
            ``device`` (empty: ``auto``) and ``options_json`` (a JSON object; empty: none).

    Raises:
        InvalidArgumentError: no model or backend, an unknown task, or options that are not a
            JSON object (metadata ``field`` names which).

    """
    if not request.model:
        raise InvalidArgumentError("model: must be set", field="model")
    if not request.backend:
        raise InvalidArgumentError("backend: must be set", field="backend")
    try:
        tasks = tuple(Task(task) for task in request.tasks)
    except ValueError as exc:
        raise InvalidArgumentError(f"tasks: {exc}", field="tasks") from None
    try:
        options = json.loads(request.options_json) if request.options_json else {}
    except ValueError as exc:
        raise InvalidArgumentError(f"options_json: not JSON ({exc})", field="options_json") from None
    if not isinstance(options, dict):
        raise InvalidArgumentError("options_json: must be a JSON object", field="options_json")
    return ModelSpec(
        name=request.model,
        backend=request.backend,
        tasks=tasks,
        source=request.source,
        device=request.device or "auto",
        options=options,
    )


def memory_message(memory: MemoryUsage) -> model_service_pb2.MemoryUsage:
    """A MemoryUsage message (bytes) from the engine's count."""
    return model_service_pb2.MemoryUsage(ram_bytes=memory.ram_bytes, vram_bytes=memory.vram_bytes)


class BackendServicer(backend_service_pb2_grpc.BackendServiceServicer):
    """Implements ``universal_runtime.v1.BackendService`` over the backend's :class:`BackendModel`.

    Args:
        model: The backend's one model.
        stop: Called once Unload has unloaded the model: ends the process (the server stops after
            this call's answer is sent, and the process exits 0).

    """

    def __init__(self, model: BackendModel, stop: Callable[[], None]) -> None:
        self._model = model
        self._stop = stop

    @unary_rpc(f"{SERVICE}/Load")
    async def Load(self, request: pb.LoadRequest, context: grpc.aio.ServicerContext) -> pb.LoadResponse:
        """Load the model; answers its memory (bytes) and this process's id.

        Errors: INVALID_ARGUMENT for a malformed request; FAILED_PRECONDITION once a model is
        loaded (or loading, or failed to load), or for a bad entry or device; a domain error of
        the engine's as its status; anything else INTERNAL, reason MODEL_LOAD_FAILED, with the
        exception's type and text in the message.
        """
        spec = model_spec(request)
        note_model(spec.name)
        engine = await self._model.load(spec)
        return pb.LoadResponse(memory=memory_message(engine.memory_usage()), pid=os.getpid())

    @unary_rpc(f"{SERVICE}/Unload")
    async def Unload(self, request: pb.UnloadRequest, context: grpc.aio.ServicerContext) -> pb.UnloadResponse:
        """Stop taking calls, drain for up to ``drain_timeout_ms``, unload; then the process exits 0.

        A negative timeout counts as 0 (calls in flight are cancelled at once).
        """
        await self._model.close(max(0, request.drain_timeout_ms) / 1000)
        # Stopped after this answer: the server's stop lets this call end within its grace.
        asyncio.get_running_loop().call_soon(self._stop)
        return pb.UnloadResponse()

    @unary_rpc(f"{SERVICE}/Health")
    async def Health(self, request: pb.HealthRequest, context: grpc.aio.ServicerContext) -> pb.HealthResponse:
        """Whether the model is loaded and serving (False while loading, after a failed load, closing)."""
        return pb.HealthResponse(serving=self._model.serving)

    @unary_rpc(f"{SERVICE}/Stats")
    async def Stats(self, request: pb.StatsRequest, context: grpc.aio.ServicerContext) -> pb.StatsResponse:
        """The engine's memory (bytes) and queue and cache figures (zeros before a load)."""
        response = pb.StatsResponse(memory=memory_message(self._model.memory_usage()))
        engine = self._model.engine
        if engine is None:
            return response
        stats = engine.stats()
        if stats.generation is not None:
            response.has_generation = True
            response.sequences_running = stats.generation.running
            response.sequences_waiting = stats.generation.waiting
            cells = stats.generation.kv_cache
            if cells is not None:
                response.kv_cache.CopyFrom(
                    model_service_pb2.KvCacheUsage(cells_used=cells.cells_used, cells_total=cells.cells_total)
                )
                response.kv_cells_cached = cells.cells_cached
        if stats.encoder is not None:
            response.has_encoder = True
            response.encoder_queue_depth = stats.encoder.queue_depth
            response.encoder_requests_running = stats.encoder.requests_running
            response.encoder_requests_waiting = stats.encoder.requests_waiting
        return response
