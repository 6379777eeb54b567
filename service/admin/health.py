"""``health``: the standard ``grpc.health.v1.Health`` answer, overall and per service."""

from __future__ import annotations

import argparse
from typing import TextIO

from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.admin.connection import CommandError, Connection
from service.admin.output import write_json, write_table

#: Services checked besides the overall status (the empty name); the server registers these.
SERVICES = ("universal_runtime.v1.InferenceService", "universal_runtime.v1.ModelService")


def run_health(conn: Connection, args: argparse.Namespace, out: TextIO) -> None:
    """Print each service's serving status; fail when any is not SERVING.

    Raises:
        CommandError: no server, a refused call, or a service that is not SERVING (exit code 1).

    """
    statuses: dict[str, str] = {}
    with conn.channel() as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", *SERVICES):
            response = conn.call(stub.Check, health_pb2.HealthCheckRequest(service=service))
            statuses[service] = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    if args.json:
        write_json(out, {"address": conn.address, "services": statuses})
    else:
        write_table(
            out, ("SERVICE", "STATUS"), [(name or "(overall)", status) for name, status in statuses.items()]
        )
    failing = [name or "(overall)" for name, status in statuses.items() if status != "SERVING"]
    if failing:
        raise CommandError(f"not serving: {', '.join(failing)}")
