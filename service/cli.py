"""``universal-runtime``: run the gRPC server, and the REST gateway beside it by default.

``universal-runtime [serve] [flags]`` serves; ``universal-runtime ps|ls|load|unload|health|pull|prepare``
are the operator subcommands of :mod:`service.admin`.
"""

from __future__ import annotations

# First: OpenMP settings must be in the environment before anything loads libgomp.
import service.openmp  # noqa: F401  (isort: skip)
import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from engines.process_lane import preload_modules
from service.admin.main import COMMANDS, run
from service.event_loop import EventLoopError, loop_factory, loop_name
from service.logging_setup import configure_logging
from service.server import start_server
from service.settings import Settings
from service.shared.api_keys import load_api_keys
from service.shared.settings import describe_settings_error
from service.shared.tls import TlsConfigError

if TYPE_CHECKING:
    import grpc
    from fastapi import FastAPI

    from gateway.batch_lines import BatchLineExecutor
    from gateway.https import Https
    from service.faces.in_process import InProcessFace
    from service.server import RunningServer

log = logging.getLogger(__name__)

BATCH_LANE = "batch"
"""The fair-share lane of batch lines on a server without keys (all batches share it)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags; each overrides the matching ``UR_*`` environment variable."""
    parser = argparse.ArgumentParser(
        prog="universal-runtime [serve]",
        description="Run the gRPC server, and the REST gateway beside it by default.",
        epilog=f"Other commands: {', '.join(COMMANDS)}; see 'universal-runtime COMMAND --help'.",
    )
    parser.add_argument("--grpc-host")
    parser.add_argument("--grpc-port", type=int)
    parser.add_argument("--gateway-host")
    parser.add_argument("--gateway-port", type=int)
    parser.add_argument("--metrics-port", type=int, help="gRPC server's own /metrics port; 0 = off")
    parser.add_argument("--no-gateway", action="store_true", help="serve gRPC only")
    parser.add_argument("--catalog", dest="catalog_path", type=Path, help="model catalog YAML")
    parser.add_argument("--device", help="auto, cpu, cuda[:N] or mps")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument(
        "--log-level", help="critical, error, warning, info or debug (default: UR_LOG_LEVEL, info)"
    )
    return parser.parse_args(argv)


def gateway_app(settings: Settings, target: str, in_process: InProcessFace | None = None) -> FastAPI:
    """The in-process REST gateway for the gRPC server at ``target``, built from the server's settings.

    It shares the server's keys (``api_key``, ``api_keys_file``), ``auth_public_health`` and
    message limit; ``gateway_cors_origins`` turns CORS on. With ``in_process`` (the server's
    :class:`service.faces.in_process.InProcessFace`), its calls run on the core directly, without
    the loopback hop, unless ``gateway_in_process_calls`` is off.

    Raises:
        ValueError: A CORS origin is malformed, or the keys file (read again) is.

    """
    from gateway.app import create_app
    from gateway.cors import parse_cors_origins

    return create_app(
        target,
        max_message_bytes=settings.max_receive_message_bytes,
        shutdown_grace_s=settings.shutdown_grace_s,
        api_keys=load_api_keys(settings.api_key_value(), settings.api_keys_file),
        auth_public_health=settings.auth_public_health,
        cors_origins=parse_cors_origins(settings.gateway_cors_origins),
        embeddings_truncate=settings.gateway_embeddings_truncate,
        wrap_channel=in_process.channel
        if in_process is not None and settings.gateway_in_process_calls
        else None,
    )


def gateway_https(settings: Settings) -> Https | None:
    """HTTPS of the gateway started beside the server (``UR_GATEWAY_TLS_*``), or ``None`` (HTTP).

    Its certificate is looked at every ``tls_refresh_interval_s``, like the server's.

    Raises:
        service.shared.tls.TlsConfigError: half a configuration, or a file unreadable or wrong.

    """
    from gateway.https import Https

    return Https.from_settings(
        "UR_GATEWAY_TLS_",
        settings.gateway_tls_cert_file,
        settings.gateway_tls_key_file,
        settings.gateway_tls_client_ca_file,
        settings.tls_refresh_interval_s,
    )


async def start_batch_lines(
    settings: Settings, target: str, running: RunningServer
) -> BatchLineExecutor | None:
    """Start the server's batch runner with the gateway's routes as its line executor.

    Each line runs through its route's own code (:class:`gateway.batch_lines.BatchLineExecutor`)
    as calls of the server's core in this process (:meth:`InProcessFace.channel`), made as the
    key that submitted the batch (its trusted caller: no credential travels; a key removed from
    the keys file since answers 401), in that key's fair-share lane (``batch`` on a server
    without keys). This needs no HTTP gateway, so ``--no-gateway`` servers run batches too. The
    lines may name the batch endpoints (:data:`service.batches.lines.SUPPORTED_URLS`), take at
    most ``batch_line_timeout_s`` each, and see the gateway's settings
    (``gateway_embeddings_truncate``, the message limit). ``target`` (the server's address) serves
    only what runs outside the core (nothing a line calls, while the server runs). Close the
    executor after the server stopped (the runner first).

    Returns:
        The started executor, or ``None`` when the server has no batch runner.

    Raises:
        RuntimeError: The server has a batch runner but no in-process face to run its lines on.

    """
    if running.batches is None:
        return None
    face = running.in_process
    if face is None:
        raise RuntimeError("the batch runner needs the server's in-process face")
    from engines.fair_share import Caller
    from gateway.batch_lines import BatchLineExecutor
    from gateway.settings import GatewayConfig
    from service.batches.lines import SUPPORTED_URLS

    def as_key(channel: grpc.aio.Channel, key_name: str) -> grpc.aio.Channel:
        return face.channel(channel, trusted_caller=Caller(name=key_name, lane=key_name or BATCH_LANE))

    config = GatewayConfig(
        grpc_target=target,
        api_key=None,
        max_message_bytes=settings.max_receive_message_bytes,
        shutdown_grace_s=settings.shutdown_grace_s,
        embeddings_truncate=settings.gateway_embeddings_truncate,
    )
    executor = BatchLineExecutor(
        config, wrap_channel=as_key, urls=SUPPORTED_URLS, timeout_s=settings.batch_line_timeout_s
    )
    await executor.start()
    running.batches.start(executor.execute)
    return executor


async def serve(settings: Settings, *, with_gateway: bool) -> None:
    """Run until SIGTERM/SIGINT, then shut both faces down together within ``shutdown_grace_s``.

    On the signal, gRPC health turns NOT_SERVING and new calls are refused on both faces; in-flight
    gRPC calls and SSE streams get the grace period; whatever still runs then is cut with a status
    (gRPC) or an error event (SSE). The signal handlers are ours, not uvicorn's, so both faces
    start draining at once instead of one after the other.
    """
    # Checked before the server starts, so a bad gateway TLS setting stops nothing half-way.
    https = gateway_https(settings) if with_gateway else None
    loop = asyncio.get_running_loop()
    log.info("event loop", extra={"event_loop": loop_name(loop)})
    # The internal socket (TLS only) also serves the batch executor's channel, gateway or not.
    running = await start_server(settings, internal_socket=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    target = (
        f"127.0.0.1:{running.port}"
        if settings.grpc_host in ("0.0.0.0", "::")
        else (f"{settings.grpc_host}:{running.port}")
    )
    if running.internal_socket is not None:  # the server speaks TLS: see service.tls.InternalSocket
        target = running.internal_socket.target
    batch_lines = await start_batch_lines(settings, target, running)
    gateway_server = None
    gateway_task = None
    if with_gateway:
        from gateway.https import uvicorn_server
        from gateway.tracing import instrument_app

        app = gateway_app(settings, target, running.in_process)
        instrument_app(app)  # route spans, when tracing is on
        gateway_server = uvicorn_server(
            app,
            https,
            host=settings.gateway_host,
            port=settings.gateway_port,
            log_config=None,
            timeout_graceful_shutdown=settings.shutdown_grace_s + 2.0,
        )
        gateway_server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
        gateway_task = asyncio.create_task(gateway_server.serve())
    # What start-up made (modules, the contract's descriptors, the apps; see
    # docs/architecture/design-notes.md#freezing-the-start-up-heap) lives as long as the process:
    # out of the collector's generations, a full collection set off by a large request's allocations
    # (it stops every thread, the loop's too) no longer walks it. Models load later and are not
    # frozen: unloading one frees its cycles.
    gc.collect()
    gc.freeze()
    await stop.wait()
    draining = [running.stop()]
    if gateway_server is not None and gateway_task is not None:
        # uvicorn's own exit handler: stops accepting, and lets sse-starlette tell streams to drain.
        gateway_server.handle_exit(signal.SIGTERM, None)
        draining.append(gateway_task)
    await asyncio.gather(*draining)
    if batch_lines is not None:  # after the server: its runner stopped first (RunningServer.stop)
        await batch_lines.close()


def check_startup_settings(settings: Settings, *, with_gateway: bool) -> None:
    """Read the keys file and CORS origins before anything starts, so a mistake stops start-up.

    Raises:
        SystemExit: The keys file or an origin is malformed; the message names it (never a key).

    """
    try:
        load_api_keys(settings.api_key_value(), settings.api_keys_file)
        if with_gateway:
            from gateway.cors import parse_cors_origins

            parse_cors_origins(settings.gateway_cors_origins)
    except ValueError as err:  # ApiKeyError is one
        raise SystemExit(f"universal-runtime: {err}") from None


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``universal-runtime`` console script.

    ``serve`` (or no command) runs the server; the other commands go to :func:`service.admin.main.run`.

    Raises:
        SystemExit: with the command's exit status, or with a one-line message when the server
            cannot start.

    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        raise SystemExit(run(argv))
    if argv and argv[0] == "serve":
        argv = argv[1:]
    args = parse_args(argv)
    overrides = {key: value for key, value in vars(args).items() if key != "no_gateway" and value is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as err:
        raise SystemExit(f"universal-runtime: {describe_settings_error(err, 'UR_')}") from None
    configure_logging(settings.log_level)
    check_startup_settings(settings, with_gateway=not args.no_gateway)
    try:
        # Named in UR_EVENT_LOOP, uvloop must be installed; by default asyncio's loop stands in.
        new_loop = loop_factory(settings.event_loop, explicit="event_loop" in settings.model_fields_set)
    except EventLoopError as err:
        raise SystemExit(f"universal-runtime: {err}") from None
    # Process-lane children re-run the launcher, which imports this module: warm in the forkserver.
    preload_modules(__name__)
    try:
        # Not asyncio.run: it always makes asyncio's own loop (see service.event_loop).
        with asyncio.Runner(loop_factory=new_loop) as runner:
            runner.run(serve(settings, with_gateway=not args.no_gateway))
    except TlsConfigError as err:  # its message names the setting; a traceback would add nothing
        raise SystemExit(f"universal-runtime: {err}") from None


if __name__ == "__main__":
    main()
