"""``GET /health``: the server's standard gRPC health status, for load balancers and probes."""

from __future__ import annotations

import logging

import grpc
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from grpc_health.v1 import health_pb2

from gateway.calls import Rpc

logger = logging.getLogger(__name__)

router = APIRouter(tags=["health"])

# A probe must answer promptly even when the server hangs; probes usually time out after a few seconds.
HEALTH_CHECK_TIMEOUT_S = 3.0
# Service "": the whole server. Built once: gRPC only reads the message it sends.
_WHOLE_SERVER = health_pb2.HealthCheckRequest(service="")


@router.get("/health")
async def health(rpc: Rpc) -> JSONResponse:
    """Check the server with ``grpc.health.v1.Health/Check`` (service ``""``: the whole server).

    Returns 200 ``{"status": "SERVING"}``; 503 ``{"status": <other status>}`` when the server
    reports anything else, or ``{"status": "UNREACHABLE", "detail": ...}`` when the call fails.
    Needs no API key unless the app was built with ``auth_public_health=False``.
    """
    try:
        response = await rpc.unary(
            rpc.clients.health.Check,
            _WHOLE_SERVER,
            deadline_s=HEALTH_CHECK_TIMEOUT_S,
        )
    except grpc.aio.AioRpcError as err:
        logger.warning("health check failed: %s %s", err.code().name, err.details())
        return JSONResponse({"status": "UNREACHABLE", "detail": err.code().name}, status_code=503)
    try:
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    except ValueError:  # a status value newer than this build
        status = "UNKNOWN"
    return JSONResponse({"status": status}, status_code=200 if status == "SERVING" else 503)
