"""``universal-runtime-gateway``: run the REST gateway with uvicorn.

Settings come from flags, then ``UR_GATEWAY_*`` environment variables, then defaults; see
:class:`gateway.settings.GatewaySettings`. Prefer ``UR_GATEWAY_API_KEY`` over ``--api-key``:
command lines are visible to other local users.
"""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Sequence

from pydantic import ValidationError

from gateway import tracing
from gateway.app import create_app
from gateway.cors import parse_cors_origins
from gateway.https import gateway_tls, run_uvicorn
from gateway.settings import ENV_PREFIX, GatewaySettings
from gateway.workers import run_workers
from service.shared.api_keys import ApiKeyError
from service.shared.flags import add_switch
from service.shared.settings import describe_settings_error
from service.shared.tls import TlsConfigError


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser; every flag defaults to ``None`` so unset flags defer to the env."""
    parser = argparse.ArgumentParser(
        prog="universal-runtime-gateway",
        description="OpenAI-compatible REST gateway for the Universal Runtime gRPC server. "
        "Each flag can also be set with the environment variable UR_GATEWAY_<FLAG>.",
    )
    parser.add_argument("--grpc-target", help="gRPC server address (default 127.0.0.1:50051)")
    parser.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8000)")
    parser.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on /v1 routes")
    parser.add_argument("--api-keys-file", help="YAML/JSON file of key name: key, accepted on /v1 routes")
    add_switch(
        parser,
        "--auth-public-health",
        "/health needs no key (default); --no-auth-public-health guards it too",
    )
    parser.add_argument("--cors-origins", help="comma-separated origins allowed cross-origin calls")
    parser.add_argument("--max-message-bytes", type=int, help="largest request body / gRPC message")
    parser.add_argument("--workers", type=int, help="gateway processes sharing the port (default 1)")
    parser.add_argument("--shutdown-grace-s", type=float, help="seconds streams get on shutdown (default 10)")
    parser.add_argument(
        "--log-level", choices=["critical", "error", "warning", "info", "debug"], help="default info"
    )
    return parser


def load_settings(argv: Sequence[str] | None = None) -> GatewaySettings:
    """Parse ``argv`` (default ``sys.argv[1:]``) over the ``UR_GATEWAY_*`` environment.

    Raises:
        SystemExit: Invalid flags (argparse) or invalid values (reported like argparse errors).

    """
    parser = build_parser()
    args = parser.parse_args(argv)
    overrides = {name: value for name, value in vars(args).items() if value is not None}
    try:
        return GatewaySettings(**overrides)
    except ValidationError as err:
        parser.error(describe_settings_error(err, ENV_PREFIX))


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``universal-runtime-gateway``: load settings and serve until interrupted.

    With ``workers`` above 1, that many processes serve one socket (:mod:`gateway.workers`).

    Raises:
        SystemExit: A setting is invalid, the server could not start, or a worker failed.

    """
    settings = load_settings(argv)
    _configure_logging(settings)
    if settings.workers == 1:
        serve(settings)
        return
    status = run_workers(
        settings.workers,
        serve_worker,
        settings,
        host=settings.host,
        port=settings.port,
        grace_s=settings.shutdown_grace_s + 2.0,
    )
    if status:
        raise SystemExit(status)


def _configure_logging(settings: GatewaySettings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def serve(settings: GatewaySettings, sockets: list[socket.socket] | None = None) -> None:
    """Build the gateway from ``settings`` and serve it in this process until interrupted.

    Args:
        settings: The gateway's settings.
        sockets: Already-bound listening sockets (a worker's); ``None`` binds ``host:port``.

    Raises:
        SystemExit: A setting is invalid (one line naming it), or the server could not start.

    """
    try:
        https, grpc_credentials = gateway_tls(settings)
        tracing.configure_gateway(settings.otlp_endpoint)  # before the app's channel is made
        app = create_app(
            settings.grpc_target,
            api_key=settings.api_key_value(),
            max_message_bytes=settings.max_message_bytes,
            shutdown_grace_s=settings.shutdown_grace_s,
            api_keys_file=settings.api_keys_file,
            auth_public_health=settings.auth_public_health,
            cors_origins=parse_cors_origins(settings.cors_origins),
            grpc_credentials=grpc_credentials,
            routing=settings.routing,
            embeddings_truncate=settings.embeddings_truncate,
            max_json_object_keys=settings.max_json_object_keys,
        )
    # The messages name the setting, or the keys file and key name (never a key): no traceback.
    except (ApiKeyError, TlsConfigError, RuntimeError) as err:
        raise SystemExit(f"universal-runtime-gateway: {err}") from None
    tracing.instrument_app(app)
    # uvicorn waits for open responses a little past the streams' own grace (they then end themselves).
    run_uvicorn(
        app,
        https,
        sockets=sockets,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        header_limits=settings.header_limits(),
        timeout_graceful_shutdown=settings.shutdown_grace_s + 2.0,
    )


def serve_worker(settings: GatewaySettings, sock: socket.socket) -> None:
    """One worker process of :func:`main` (module level, so ``spawn`` can start it): serve on ``sock``."""
    _configure_logging(settings)
    serve(settings, [sock])


if __name__ == "__main__":
    main()
