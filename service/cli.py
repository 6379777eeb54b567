"""``universal-runtime``: run the gRPC server, and the REST gateway beside it by default."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from pathlib import Path

from service.logging_setup import configure_logging
from service.server import start_server
from service.settings import Settings


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags; each overrides the matching ``UR_*`` environment variable."""
    parser = argparse.ArgumentParser(prog="universal-runtime", description=__doc__)
    parser.add_argument("--grpc-host")
    parser.add_argument("--grpc-port", type=int)
    parser.add_argument("--gateway-host")
    parser.add_argument("--gateway-port", type=int)
    parser.add_argument("--no-gateway", action="store_true", help="serve gRPC only")
    parser.add_argument("--catalog", dest="catalog_path", type=Path, help="model catalog YAML")
    parser.add_argument("--device", help="auto, cpu, cuda[:N] or mps")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--log-level", default=os.environ.get("UR_LOG_LEVEL", "INFO"))
    return parser.parse_args(argv)


async def serve(settings: Settings, *, with_gateway: bool) -> None:
    """Run until SIGTERM/SIGINT, then shut down gracefully (gateway first, then gRPC)."""
    running = await start_server(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    gateway_server = None
    gateway_task = None
    if with_gateway:
        import uvicorn

        from gateway.app import create_app

        target = (
            f"127.0.0.1:{running.port}"
            if settings.grpc_host in ("0.0.0.0", "::")
            else (f"{settings.grpc_host}:{running.port}")
        )
        app = create_app(
            target, api_key=settings.api_key, max_message_bytes=settings.max_receive_message_bytes
        )
        config = uvicorn.Config(app, host=settings.gateway_host, port=settings.gateway_port, log_config=None)
        gateway_server = uvicorn.Server(config)
        gateway_server.install_signal_handlers = lambda: None  # signals are ours
        gateway_task = asyncio.create_task(gateway_server.serve())
    await stop.wait()
    if gateway_server is not None and gateway_task is not None:
        gateway_server.should_exit = True
        with contextlib.suppress(Exception):
            await gateway_task
    await running.stop()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``universal-runtime`` console script."""
    args = parse_args(argv)
    configure_logging(args.log_level)
    overrides = {
        key: value
        for key, value in vars(args).items()
        if key not in ("no_gateway", "log_level") and value is not None
    }
    settings = Settings(**overrides)
    asyncio.run(serve(settings, with_gateway=not args.no_gateway))


if __name__ == "__main__":
    main()
