"""ManagedModel → the Model message of ModelService."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format, struct_pb2
from universal_runtime.v1 import model_service_pb2 as pb

from engines.errors import RuntimeServiceError
from engines.reasons import Reason
from engines.types import Task
from service.convert.messages import enum_table, wire_values
from service.convert.validation import require
from service.model_manager import ManagedModel, ModelManager, ModelState

log = logging.getLogger(__name__)

TASKS_BY_PB = enum_table(pb.Task, "TASK_", Task)
TASKS = wire_values(TASKS_BY_PB)

STATES = {
    ModelState.NOT_LOADED: pb.MODEL_STATUS_NOT_LOADED,
    ModelState.LOADING: pb.MODEL_STATUS_LOADING,
    ModelState.READY: pb.MODEL_STATUS_READY,
    ModelState.UNLOADING: pb.MODEL_STATUS_UNLOADING,
    ModelState.ERROR: pb.MODEL_STATUS_ERROR,
}


#: Most option overrides one LoadModel may carry.
MAX_OPTION_OVERRIDES = 64
#: Most bytes of those overrides, encoded (a chat template is a few KiB): checked before they are
#: read into Python, on the event loop, so a large Struct within the request limit is refused unread.
MAX_OPTION_OVERRIDE_BYTES = 64 * 1024


def load_options(request: pb.LoadModelRequest | pb.WatchModelRequest) -> dict[str, Any] | None:
    """LoadModel's (or WatchModel's) option overrides as a plain mapping (numbers as floats); None when unset.

    Their values are checked by the model manager against the backend's options model.

    Raises:
        InvalidArgumentError: more than :data:`MAX_OPTION_OVERRIDES` keys or
            :data:`MAX_OPTION_OVERRIDE_BYTES` bytes (field ``options``).

    """
    if not request.HasField("options"):
        return None
    count = len(request.options.fields)
    require(count <= MAX_OPTION_OVERRIDES, "options", f"at most {MAX_OPTION_OVERRIDES} options, got {count}")
    size = request.options.ByteSize()
    require(
        size <= MAX_OPTION_OVERRIDE_BYTES,
        "options",
        f"options of at most {MAX_OPTION_OVERRIDE_BYTES} bytes, got {size}",
    )
    _require_finite(request.options, "options")
    return json_format.MessageToDict(request.options)


def _require_finite(value: struct_pb2.Struct | struct_pb2.ListValue | struct_pb2.Value, field: str) -> None:
    """Refuse NaN and infinities anywhere in a Struct (JSON has neither; a bound cannot hold them).

    Recursion is bounded by the Struct's encoded size (:data:`MAX_OPTION_OVERRIDE_BYTES`) and
    protobuf's own nesting limit of 100.

    Raises:
        InvalidArgumentError: reason INVALID_MODEL_OPTION, ``field`` the dotted path of the number
            (``options.n_ctx``), ``option`` that path without ``options.``.

    """
    if isinstance(value, struct_pb2.Struct):
        for key, item in value.fields.items():
            _require_finite(item, f"{field}.{key}")
    elif isinstance(value, struct_pb2.ListValue):
        for i, item in enumerate(value.values):
            _require_finite(item, f"{field}[{i}]")
    elif value.HasField("struct_value"):
        _require_finite(value.struct_value, field)
    elif value.HasField("list_value"):
        _require_finite(value.list_value, field)
    elif value.HasField("number_value"):
        number = value.number_value
        option = field.removeprefix("options.")
        require(
            math.isfinite(number),
            field,
            f"a finite number, got {number}",
            reason=Reason.INVALID_MODEL_OPTION,
            option=option,
        )


def options_struct(options: Mapping[str, Any]) -> struct_pb2.Struct:
    """Options as a Struct; values YAML gives that JSON lacks (dates) become their text."""
    struct = struct_pb2.Struct()
    struct.update(json.loads(json.dumps(options, default=str)))
    return struct


async def estimate_memory(manager: ModelManager, managed: ManagedModel) -> None:
    """Compute the model's memory estimate unless known (the manager caches it in ``managed.required``).

    An entry whose estimate fails is left without one (``required_memory`` unset): its status
    says what is wrong with it, and a load reports the error itself. Never raises.
    """
    try:
        await manager.required_memory(managed.spec.name)
    except RuntimeServiceError as exc:
        log.debug("no memory estimate", extra={"model": managed.spec.name, "error": exc.message})
    except Exception:
        log.warning("memory estimate failed", exc_info=True, extra={"model": managed.spec.name})


def model_message(manager: ModelManager, managed: ManagedModel) -> pb.Model:
    """Describe one managed model (state, device, memory, keep-alive, expiry).

    ``required_memory`` is the manager's cached estimate (:meth:`ModelManager.required_memory`),
    unset until one is computed.
    """
    expires = managed.expires_at()
    generation = managed.stats().generation
    cells = generation.kv_cache if generation is not None else None
    kv_cache = pb.KvCacheUsage(cells_used=cells.cells_used, cells_total=cells.cells_total) if cells else None
    backend = managed.backend_process()
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
        kv_cache=kv_cache,
        options=options_struct(managed.effective_options()),
        required_memory=(
            pb.MemoryUsage(ram_bytes=_int64(required.ram_bytes), vram_bytes=_int64(required.vram_bytes))
            if (required := managed.required) is not None
            else None
        ),
        backend_process=(
            pb.BackendProcess(
                pid=backend.pid,
                started_at_unix_ms=int(backend.started_at * 1000),
                rss_bytes=backend.rss_bytes,
                starts=managed.backend_starts,
            )
            if backend is not None
            else None
        ),
    )


_INT64_MAX = (1 << 63) - 1


def _int64(value: int) -> int:
    """``value`` (bytes) clamped to an ``int64`` field's range.

    An estimate past 2^63 - 1 bytes (a catalog's huge context) reads as the largest, so that one
    entry never breaks the listing of every model.
    """
    return min(max(int(value), 0), _INT64_MAX)
