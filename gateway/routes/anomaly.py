"""Anomaly detection over ``FitAnomalyDetector``, ``DetectAnomaly``, ``List``/``DeleteAnomalyDetector``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from universal_runtime.v1 import anomaly_pb2 as pb

from gateway.calls import Rpc
from gateway.json_body import JsonBodyRoute
from gateway.schemas.anomaly import DetectBody, FitBody
from gateway.translate.anomaly import to_detect_request, to_fit_request, to_json

router = APIRouter(tags=["anomaly"], route_class=JsonBodyRoute)


@router.post("/v1/anomaly/fit")
async def fit_detector(body: FitBody, rpc: Rpc) -> dict[str, Any]:
    """Fit and save a named detector: ``{"detector", "version", "row_count", "threshold"}``.

    Raises:
        grpc.aio.AioRpcError: INVALID_ARGUMENT (400) for bad rows, names or settings.

    """
    return to_json(await rpc.unary(rpc.clients.inference.FitAnomalyDetector, to_fit_request(body)))


@router.post("/v1/anomaly/detect")
async def detect(body: DetectBody, rpc: Rpc) -> dict[str, Any]:
    """Score rows: ``{"scores": [...], "summary": {...}}``.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (404) for an unknown detector; INVALID_ARGUMENT (400).

    """
    return to_json(await rpc.unary(rpc.clients.inference.DetectAnomaly, to_detect_request(body)))


@router.get("/v1/anomaly/detectors")
async def list_detectors(rpc: Rpc) -> dict[str, Any]:
    """Saved detectors: ``{"object": "list", "data": [...]}``."""
    response = await rpc.unary(rpc.clients.inference.ListAnomalyDetectors, pb.ListAnomalyDetectorsRequest())
    return {"object": "list", "data": to_json(response).get("detectors", [])}


@router.delete("/v1/anomaly/detectors/{name}")
async def delete_detector(name: str, rpc: Rpc) -> dict[str, Any]:
    """Delete every version of a detector: ``{"detector", "versions_deleted", "deleted": true}``.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (404) for an unknown detector; INVALID_ARGUMENT for a bad name.

    """
    request = pb.DeleteAnomalyDetectorRequest(detector=name)
    response = await rpc.unary(rpc.clients.inference.DeleteAnomalyDetector, request)
    return {**to_json(response), "deleted": True}
