"""A process that serves only gRPC health: the stall probe's control (``python -m tests.fuzz.control_server PORT``).

Its health checks take as long as the machine makes any idle Python process wait (CPU shared
with other work), so the probe subtracts that from what it measures on the server under test.
"""

from __future__ import annotations

import asyncio
import sys

import grpc
from grpc_health.v1 import health, health_pb2_grpc


async def serve(port: int) -> None:
    """Serve ``grpc.health.v1.Health`` (SERVING) on 127.0.0.1:``port`` until killed."""
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
