"""The backend's gRPC server on its Unix socket, from start to a graceful stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

import grpc
from universal_runtime.v1 import backend_service_pb2_grpc, inference_service_pb2_grpc

from engines import tracing as engine_tracing
from engines.executor import ExecutorPool
from engines.metrics import set_enabled as set_metrics_enabled
from engines.registry import import_engine_modules
from service.backend.control import BackendServicer
from service.backend.inference import BackendInferenceServicer
from service.backend.model import BackendModel
from service.backend.process import on_stop_signals
from service.settings import Settings
from service.shared import tracing as shared_tracing

log = logging.getLogger("service.backend")

#: Seconds the server's stop gives calls still open (the Unload call's own answer among them).
STOP_GRACE_S = 5.0


def configure_backend_tracing(endpoint: str | None) -> bool:
    """Turn tracing on in this process when ``endpoint`` is set: each call's span and the engines' spans.

    No grpc instrumentation: the handlers make their spans themselves, children of the server's
    span named by the call's ``traceparent`` (:func:`service.backend.calls.call_scope`).

    Returns:
        Whether tracing is on.

    Raises:
        RuntimeError: an endpoint is set but the ``[otel]`` extra is not installed.

    """
    if not endpoint:
        return False
    provider = shared_tracing.tracer_provider(endpoint)
    engine_tracing.enable(provider.get_tracer("universal_runtime.engines"))
    return True


def bind_unix_socket(server: grpc.aio.Server, path: str) -> str:
    """Listen on ``unix:path`` only (never TCP); a stale socket file there is removed first.

    Returns:
        The gRPC address, ``unix:<path>``.

    Raises:
        RuntimeError: the socket could not be bound (a path too long for a socket, a missing
            folder, a file that is not a socket in the way).

    """
    target = Path(path)
    if target.is_socket():
        target.unlink()
    address = f"unix:{path}"
    if server.add_insecure_port(address) == 0:
        raise RuntimeError(f"could not bind {address}")
    return address


def remove_socket(path: str) -> None:
    """Delete the socket file at ``path`` if it is still there (errors ignored: the process ends next)."""
    with contextlib.suppress(OSError):
        Path(path).unlink(missing_ok=True)


async def serve(socket_path: str, settings: Settings) -> int:
    """Serve BackendService and InferenceService on ``unix:socket_path`` until Unload or a stop signal.

    A stop signal (SIGTERM, SIGINT) drains running calls for up to ``shutdown_grace_s`` and
    unloads, as Unload does. The socket file is removed at the end.

    Returns:
        The process's exit status: 0 after a graceful stop.

    Raises:
        RuntimeError: the socket could not be bound, or tracing is asked for without OpenTelemetry.
        ImportError: a module of ``engine_modules`` cannot be imported.

    """
    configure_backend_tracing(settings.otlp_endpoint)
    set_metrics_enabled(settings.metrics_enabled)
    import_engine_modules(settings.engine_modules)
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    executors = ExecutorPool()
    model = BackendModel(settings, executors)

    def stop_after_unload() -> None:
        stopped.set()

    async def close(reason: str, drain_s: float) -> None:
        log.info("stopping", extra={"reason": reason, "drain_s": drain_s})
        await model.close(drain_s)
        stopped.set()

    closing: list[asyncio.Task[None]] = []

    def on_signal(name: str) -> None:
        if not closing:
            closing.append(loop.create_task(close(name, settings.shutdown_grace_s)))

    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", settings.max_receive_message_bytes),
            ("grpc.max_send_message_length", settings.max_send_message_bytes),
        ]
    )
    backend_service_pb2_grpc.add_BackendServiceServicer_to_server(
        BackendServicer(model, stop_after_unload), server
    )
    inference_service_pb2_grpc.add_InferenceServiceServicer_to_server(
        BackendInferenceServicer(settings, model), server
    )
    address = bind_unix_socket(server, socket_path)
    await server.start()
    on_stop_signals(loop, on_signal)
    log.info("backend serving", extra={"address": address, "pid": os.getpid()})
    try:
        await stopped.wait()
        await server.stop(STOP_GRACE_S)
        for task in closing:
            await task
    finally:
        executors.shutdown(wait=False)
        remove_socket(socket_path)
        if shared_tracing.enabled():
            shared_tracing.shutdown()
    log.info("backend stopped")
    return 0
