"""Anomaly detection over ``FitAnomalyDetector``, ``DetectAnomaly``, ``List``/``DeleteAnomalyDetector``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from universal_runtime.v1 import anomaly_pb2 as pb

from gateway.dependencies import CallMetadata, get_call_metadata, get_clients
from gateway.grpc_clients import GrpcClients
from gateway.schemas.anomaly import DetectBody, FitBody
from gateway.translate.anomaly import to_detect_request, to_fit_request, to_json

router = APIRouter(tags=["anomaly"])
Clients = Annotated[GrpcClients, Depends(get_clients)]
Metadata = Annotated[CallMetadata, Depends(get_call_metadata)]


@router.post("/v1/anomaly/fit")
async def fit_detector(body: FitBody, clients: Clients, metadata: Metadata) -> dict[str, Any]:
    """Fit and save a named detector: ``{"detector", "version", "row_count", "threshold"}``.

    Raises:
        grpc.aio.AioRpcError: INVALID_ARGUMENT (400) for bad rows, names or settings.

    """
    return to_json(await clients.inference.FitAnomalyDetector(to_fit_request(body), metadata=metadata))


@router.post("/v1/anomaly/detect")
async def detect(body: DetectBody, clients: Clients, metadata: Metadata) -> dict[str, Any]:
    """Score rows: ``{"scores": [...], "summary": {...}}``.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (404) for an unknown detector; INVALID_ARGUMENT (400).

    """
    return to_json(await clients.inference.DetectAnomaly(to_detect_request(body), metadata=metadata))


@router.get("/v1/anomaly/detectors")
async def list_detectors(clients: Clients, metadata: Metadata) -> dict[str, Any]:
    """Saved detectors: ``{"object": "list", "data": [...]}``."""
    response = await clients.inference.ListAnomalyDetectors(
        pb.ListAnomalyDetectorsRequest(), metadata=metadata
    )
    return {"object": "list", "data": to_json(response).get("detectors", [])}


@router.delete("/v1/anomaly/detectors/{name}")
async def delete_detector(name: str, clients: Clients, metadata: Metadata) -> dict[str, Any]:
    """Delete every version of a detector: ``{"detector", "versions_deleted", "deleted": true}``.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (404) for an unknown detector; INVALID_ARGUMENT for a bad name.

    """
    request = pb.DeleteAnomalyDetectorRequest(detector=name)
    response = await clients.inference.DeleteAnomalyDetector(request, metadata=metadata)
    return {**to_json(response), "deleted": True}
