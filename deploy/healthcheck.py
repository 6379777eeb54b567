"""Container health check: asks the server's gRPC health service whether InferenceService serves.

deploy/Dockerfile's HEALTHCHECK runs it (``docker ps`` shows the result), with nothing downloaded:
grpcio-health-checking is already a dependency. Kubernetes does not use it; its probes speak gRPC
health natively (deploy/k8s). Exits 0 when SERVING, 1 otherwise (NOT_SERVING while draining, or
no answer within the timeout). Plaintext only, like kubelet's gRPC probes: with UR_TLS_CERT_FILE
set, run the container without this check.
"""

from __future__ import annotations

import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICE = "universal_runtime.v1.InferenceService"
TIMEOUT_S = 3.0


def check(target: str, service: str = SERVICE, timeout: float = TIMEOUT_S) -> bool:
    """True when the server at ``target`` reports ``service`` SERVING within ``timeout`` seconds."""
    with grpc.insecure_channel(target) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.RpcError:
            return False
    return response.status == health_pb2.HealthCheckResponse.SERVING


def main() -> int:
    """Check the server in this container, on UR_GRPC_PORT (the server binds all interfaces here)."""
    return 0 if check(f"127.0.0.1:{os.environ.get('UR_GRPC_PORT', '50051')}") else 1


if __name__ == "__main__":
    sys.exit(main())
