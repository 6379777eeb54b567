"""``ps``, ``ls``, ``load`` and ``unload``: ModelService calls, shown as tables or JSON."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, TextIO

import yaml
from google.protobuf import json_format
from universal_runtime.v1 import model_service_pb2 as pb
from universal_runtime.v1 import model_service_pb2_grpc

from service.admin.connection import CommandError, Connection
from service.admin.output import format_bytes, format_duration, write_json, write_table
from service.admin.progress import LoadProgress

#: Deadline of LoadModel/UnloadModel when --timeout is not given: a cold load of a large model,
#: or an unload that waits for long streams to end, takes minutes, not seconds.
LIFECYCLE_TIMEOUT_S = 600.0

#: States in which a model holds (or is about to hold, or still holds) memory: what ``ps`` lists.
_IN_MEMORY = (pb.MODEL_STATUS_LOADING, pb.MODEL_STATUS_READY, pb.MODEL_STATUS_UNLOADING)


def task_name(task: int) -> str:
    """``pb.TASK_EMBED`` → ``"embed"`` (the catalog's spelling)."""
    return pb.Task.Name(task).removeprefix("TASK_").lower()


def status_name(status: int) -> str:
    """``pb.MODEL_STATUS_READY`` → ``"ready"``."""
    return pb.ModelStatus.Name(status).removeprefix("MODEL_STATUS_").lower()


def expires_in(model: pb.Model, now_ms: int) -> str:
    """When an idle model unloads, for people: ``"4m12s"``, ``"never"``, ``"in use"`` or ``"-"``."""
    if model.status != pb.MODEL_STATUS_READY:
        return "-"
    if model.pinned:
        return "never (pinned)"
    if model.keep_alive == "-1":
        return "never"
    if model.active_requests:
        return "in use"  # the countdown starts when the last request ends
    if model.expires_at_unix_ms:
        return format_duration((model.expires_at_unix_ms - now_ms) / 1000)
    return "-"


def model_json(model: pb.Model, now_ms: int) -> dict[str, Any]:
    """One model as a JSON object: catalog fields, state, memory in bytes, times in Unix ms.

    ``expires_in_s`` is seconds until an idle unload, or null when none is scheduled;
    ``required_ram_bytes``/``required_vram_bytes`` the server's estimate of a load, or null
    without one.
    """
    required = model.required_memory if model.HasField("required_memory") else None
    return {
        "name": model.name,
        "tasks": [task_name(t) for t in model.tasks],
        "backend": model.backend,
        "source": model.source,
        "status": status_name(model.status),
        "status_detail": model.status_detail,
        "device": model.device,
        "ram_bytes": model.memory.ram_bytes,
        "vram_bytes": model.memory.vram_bytes,
        "required_ram_bytes": required.ram_bytes if required is not None else None,
        "required_vram_bytes": required.vram_bytes if required is not None else None,
        "keep_alive": model.keep_alive,
        "pinned": model.pinned,
        "loaded_at_unix_ms": model.loaded_at_unix_ms,
        "expires_at_unix_ms": model.expires_at_unix_ms,
        "expires_in_s": (
            max(0.0, (model.expires_at_unix_ms - now_ms) / 1000) if model.expires_at_unix_ms else None
        ),
        "active_requests": model.active_requests,
        "kv_cache_cells_used": model.kv_cache.cells_used if model.HasField("kv_cache") else None,
        "kv_cache_cells_total": model.kv_cache.cells_total if model.HasField("kv_cache") else None,
        "backend_pid": model.backend_process.pid if model.HasField("backend_process") else None,
        "backend_rss_bytes": model.backend_process.rss_bytes if model.HasField("backend_process") else None,
        "backend_starts": model.backend_process.starts if model.HasField("backend_process") else None,
        "options": json_format.MessageToDict(model.options),
    }


def _call(conn: Connection, rpc: str, request: object, timeout_s: float | None = None) -> Any:
    """Call ``ModelService.<rpc>`` on a channel of its own (one call per command)."""
    with conn.channel() as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        return conn.call(getattr(stub, rpc), request, timeout_s=timeout_s)


def _list(conn: Connection, args: argparse.Namespace, *, loaded_only: bool) -> list[pb.Model]:
    return list(_call(conn, "ListModels", pb.ListModelsRequest(loaded_only=loaded_only)).models)


def _lifecycle(
    conn: Connection, args: argparse.Namespace, rpc: str, request: object, out: TextIO
) -> pb.Model:
    """Call LoadModel/UnloadModel with the long default deadline; prints the model as JSON with --json."""
    model = _call(conn, rpc, request, args.timeout or LIFECYCLE_TIMEOUT_S).model
    if args.json:
        write_json(out, model_json(model, int(time.time() * 1000)))
    return model


def run_ps(conn: Connection, args: argparse.Namespace, out: TextIO) -> None:
    """Models in memory (loading, ready or unloading), like ``ollama ps``.

    Raises:
        CommandError: the server could not be reached or refused the call.

    """
    models = [m for m in _list(conn, args, loaded_only=False) if m.status in _IN_MEMORY]
    now_ms = int(time.time() * 1000)
    if args.json:
        write_json(out, [model_json(m, now_ms) for m in models])
        return
    headers = (
        "NAME",
        "BACKEND",
        "PID",
        "DEVICE",
        "RAM",
        "VRAM",
        "KEEP ALIVE",
        "EXPIRES IN",
        "ACTIVE",
        "STATUS",
    )
    rows = [
        (
            m.name,
            m.backend,
            str(m.backend_process.pid) if m.HasField("backend_process") else "-",
            m.device,
            format_bytes(m.memory.ram_bytes),
            format_bytes(m.memory.vram_bytes),
            m.keep_alive,
            expires_in(m, now_ms),
            str(m.active_requests),
            status_name(m.status),
        )
        for m in models
    ]
    write_table(out, headers, rows)


def run_ls(conn: Connection, args: argparse.Namespace, out: TextIO) -> None:
    """The server's catalog: every model with its tasks, backend, source and whether it is loaded.

    Raises:
        CommandError: the server could not be reached or refused the call.

    """
    models = _list(conn, args, loaded_only=False)
    now_ms = int(time.time() * 1000)
    if args.json:
        write_json(out, [model_json(m, now_ms) for m in models])
        return
    headers = ("NAME", "TASKS", "BACKEND", "SOURCE", "LOADED")
    rows = [
        (m.name, ",".join(task_name(t) for t in m.tasks), m.backend, m.source, _loaded_column(m))
        for m in models
    ]
    write_table(out, headers, rows)


def _loaded_column(model: pb.Model) -> str:
    if model.status == pb.MODEL_STATUS_READY:
        return "yes"
    if model.status == pb.MODEL_STATUS_NOT_LOADED:
        return "no"
    return status_name(model.status)  # loading, unloading, error


def option_overrides(pairs: list[str]) -> dict[str, Any]:
    """``--option KEY=VALUE`` flags as a mapping, each VALUE read as a YAML scalar (``4096``, ``true``).

    Raises:
        CommandError: a flag without ``=`` or with an empty key, or a value that is not YAML (exit 2).

    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, equals, text = pair.partition("=")
        if not equals or not key.strip():
            raise CommandError(f"--option needs KEY=VALUE, got {pair!r}", exit_code=2)
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            raise CommandError(f"--option {key.strip()}: {text!r} is not a YAML value", exit_code=2) from None
        # A Struct holds JSON values: what else YAML reads (a date) goes as its text.
        options[key.strip()] = json.loads(json.dumps(value, default=str))
    return options


def run_load(conn: Connection, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
    """Load ``args.name`` now, optionally with a keep-alive, pinning and option overrides; waits until ready.

    The load is watched (``ModelService.WatchModel``): when ``err`` is a terminal (and without
    ``--json``), a progress bar there shows its status strings (``Installing: downloading 42%``,
    ``Loading``, ``Running: ...``); a pipe or a log gets no redrawn lines. ``out`` gets the loaded
    model (memory measured and estimated) and its final status.

    Raises:
        CommandError: unknown model, bad keep-alive, bad option overrides, no memory, a failed
            load, a model loaded with other options, or no server.

    """
    request = pb.WatchModelRequest(name=args.name, load=True, keep_alive=args.keep_alive or "")
    if args.pin is not None:
        request.pinned = args.pin
    if args.option:
        request.options.update(option_overrides(args.option))
    draw = not args.json and err.isatty()
    model = _watch_load(conn, request, args.timeout or LIFECYCLE_TIMEOUT_S, err if draw else None)
    if args.json:
        write_json(out, model_json(model, int(time.time() * 1000)))
        return
    vram = f", {format_bytes(model.memory.vram_bytes)} VRAM" if model.memory.vram_bytes else ""
    estimate = (
        f", estimated {_estimate_text(model.required_memory)}" if model.HasField("required_memory") else ""
    )
    pinned = ", pinned" if model.pinned else ""
    out.write(
        f"loaded {model.name} on {model.device} ({format_bytes(model.memory.ram_bytes)} RAM{vram}{estimate}, "
        f"keep-alive {model.keep_alive}{pinned})\nstatus: {model.status_detail}\n"
    )


def _estimate_text(required: pb.MemoryUsage) -> str:
    """An estimate for people: ``"90.1 MiB RAM"``, with ``" + 1.2 GiB VRAM"`` when it has device memory."""
    vram = f" + {format_bytes(required.vram_bytes)} VRAM" if required.vram_bytes else ""
    return f"{format_bytes(required.ram_bytes)} RAM{vram}"


def _watch_load(
    conn: Connection, request: pb.WatchModelRequest, timeout_s: float, err: TextIO | None
) -> pb.Model:
    """Run ``WatchModel`` with ``load``; draws each status on ``err`` (none when None); the model at the end.

    The stream is bounded by ``timeout_s`` (its deadline) and by the server (one hour at most).

    Raises:
        CommandError: the call failed (a failed load ends the stream with its status), or the
            stream ended with the model not running.

    """
    progress: LoadProgress | None = None  # drawn from the first message: a refused call draws none
    model: pb.Model | None = None
    try:
        with conn.channel() as channel:
            stub = model_service_pb2_grpc.ModelServiceStub(channel)
            for response in conn.stream(stub.WatchModel, request, timeout_s=timeout_s):
                model = response.model
                if err is not None:
                    progress = progress or LoadProgress(err, request.name)
                    progress.show(model)
    finally:
        if progress is not None:
            progress.close()
    if model is None or model.status != pb.MODEL_STATUS_READY:
        detail = model.status_detail if model is not None else "no status"
        raise CommandError(f"model {request.name} is not running: {detail}")
    return model


def run_unload(conn: Connection, args: argparse.Namespace, out: TextIO) -> None:
    """Unload ``args.name`` once its in-flight requests finish (``--force`` for a pinned one).

    Raises:
        CommandError: unknown model, pinned without ``--force``, or no server.

    """
    request = pb.UnloadModelRequest(name=args.name, force=args.force)
    model = _lifecycle(conn, args, "UnloadModel", request, out)
    if not args.json:
        out.write(f"unloaded {model.name} ({model.status_detail})\n")
