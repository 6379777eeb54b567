"""Model listing: ``universal_runtime.v1.Model`` to OpenAI's model object plus runtime fields."""

from __future__ import annotations

from typing import Any

from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from universal_runtime.v1 import model_service_pb2

OWNED_BY = "universal-runtime"


def enum_label(enum: EnumTypeWrapper, value: int, prefix: str) -> str:
    """Return an enum value's name without ``prefix``, lowercased (``MODEL_STATUS_READY`` -> ``ready``).

    Values unknown to this build (a newer server) give ``"unknown"`` instead of failing.
    """
    try:
        name = enum.Name(value)
    except ValueError:
        return "unknown"
    return name.removeprefix(prefix).lower()


def model_to_openai(model: model_service_pb2.Model) -> dict[str, Any]:
    """Convert a catalog ``Model`` to an OpenAI model object with runtime extensions.

    Shape: ``{"id", "object": "model", "created", "owned_by": "universal-runtime", "status",
    "status_detail", "tasks", "device", "memory": {"ram_bytes", "vram_bytes"}, "required_memory",
    "kv_cache"}``, where ``required_memory`` is the estimate of a load (``{"ram_bytes",
    "vram_bytes"}``, beside the measured ``memory``; null when the server has none) and
    ``kv_cache`` is ``{"cells_used", "cells_total"}`` for a loaded llama.cpp model, else null.
    ``status_detail`` is the status string (``"Installing: downloading 42%"`` while a load
    downloads, ``"Running: llama_cpp on cpu"``, ``"Error: <why>"``). ``created`` is
    the load time in Unix seconds, 0 when the model is not loaded (the catalog has no creation
    date). ``status`` is e.g. ``"ready"``/``"not_loaded"``; ``tasks`` e.g. ``["generate"]``.
    """
    return {
        "id": model.name,
        "object": "model",
        "created": model.loaded_at_unix_ms // 1000,
        "owned_by": OWNED_BY,
        "status": enum_label(model_service_pb2.ModelStatus, model.status, "MODEL_STATUS_"),
        "status_detail": model.status_detail,
        "tasks": [enum_label(model_service_pb2.Task, task, "TASK_") for task in model.tasks],
        "device": model.device,
        "memory": _memory(model.memory),
        "required_memory": _memory(model.required_memory) if model.HasField("required_memory") else None,
        "kv_cache": (
            {"cells_used": model.kv_cache.cells_used, "cells_total": model.kv_cache.cells_total}
            if model.HasField("kv_cache")
            else None
        ),
    }


def _memory(memory: model_service_pb2.MemoryUsage) -> dict[str, int]:
    return {"ram_bytes": memory.ram_bytes, "vram_bytes": memory.vram_bytes}


def model_list_to_openai(response: model_service_pb2.ListModelsResponse) -> dict[str, Any]:
    """Convert ``ListModelsResponse`` to OpenAI's ``{"object": "list", "data": [model, ...]}``."""
    return {"object": "list", "data": [model_to_openai(model) for model in response.models]}
