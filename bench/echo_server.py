"""A gRPC server that does no work: the transport floor of a request/response size.

``/bench.v1.Echo/Echo`` is a unary method on raw bytes (no protobuf parsing): it ignores the
request and answers ``--reply-bytes`` zero bytes. Timing our real requests against it (the same
request bytes, a reply of our response's size, the same ``grpc.aio`` client and server stack)
measures what the round trip itself costs on this machine, which no server built on gRPC can
avoid. The standard health service answers so the bench knows it is up.

Usage: ``python -m bench.echo_server --port 50099 --reply-bytes 170041``.
"""

from __future__ import annotations

import argparse
import asyncio

import grpc
from grpc_health.v1 import health, health_pb2_grpc

ECHO_SERVICE = "bench.v1.Echo"
ECHO_METHOD = f"/{ECHO_SERVICE}/Echo"


async def serve(host: str, port: int, reply_bytes: int) -> None:
    """Serve until cancelled or killed."""
    reply = bytes(reply_bytes)

    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return reply

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)])
    handler = grpc.method_handlers_generic_handler(
        ECHO_SERVICE, {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
    )
    server.add_generic_rpc_handlers((handler,))
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    server.add_insecure_port(f"{host}:{port}")
    await server.start()
    await server.wait_for_termination()


def main(argv: list[str] | None = None) -> None:
    """Parse the flags and serve."""
    parser = argparse.ArgumentParser(prog="python -m bench.echo_server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--reply-bytes", type=int, required=True, help="size of every reply")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.reply_bytes))


if __name__ == "__main__":
    main()
