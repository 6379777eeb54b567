"""ManagedModel → the Model message of ModelService."""

from __future__ import annotations

from universal_runtime.v1 import model_service_pb2 as pb

from engines.types import Task
from service.model_manager import ManagedModel, ModelManager, ModelState

TASKS = {
    Task.GENERATE: pb.TASK_GENERATE,
    Task.EMBED: pb.TASK_EMBED,
    Task.CLASSIFY: pb.TASK_CLASSIFY,
    Task.EXTRACT_ENTITIES: pb.TASK_EXTRACT_ENTITIES,
    Task.RERANK: pb.TASK_RERANK,
    Task.OCR: pb.TASK_OCR,
    Task.LAYOUT: pb.TASK_LAYOUT,
    Task.DOCUMENT_QA: pb.TASK_DOCUMENT_QA,
    Task.EXTRACT_FIELDS: pb.TASK_EXTRACT_FIELDS,
    Task.CLASSIFY_DOCUMENT: pb.TASK_CLASSIFY_DOCUMENT,
}
TASKS_BY_PB = {value: key for key, value in TASKS.items()}

STATES = {
    ModelState.NOT_LOADED: pb.MODEL_STATUS_NOT_LOADED,
    ModelState.LOADING: pb.MODEL_STATUS_LOADING,
    ModelState.READY: pb.MODEL_STATUS_READY,
    ModelState.UNLOADING: pb.MODEL_STATUS_UNLOADING,
    ModelState.ERROR: pb.MODEL_STATUS_ERROR,
}


def model_message(manager: ModelManager, managed: ManagedModel) -> pb.Model:
    """Describe one managed model (state, device, memory, keep-alive, expiry)."""
    expires = managed.expires_at()
    cells = managed.kv_cells()
    return pb.Model(
        name=managed.spec.name,
        tasks=[TASKS[t] for t in managed.spec.tasks],
        backend=managed.spec.backend,
        source=managed.spec.source,
        status=STATES[managed.state],
        status_detail=managed.status_detail,
        device=managed.device or managed.spec.device,
        memory=pb.MemoryUsage(ram_bytes=managed.memory.ram_bytes, vram_bytes=managed.memory.vram_bytes),
        keep_alive=manager.describe_keep_alive(managed),
        pinned=managed.pinned,
        loaded_at_unix_ms=int(managed.loaded_at * 1000),
        expires_at_unix_ms=int(expires * 1000) if expires is not None else 0,
        active_requests=managed.active,
        kv_cache=pb.KvCacheUsage(cells_used=cells[0], cells_total=cells[1]) if cells else None,
    )
