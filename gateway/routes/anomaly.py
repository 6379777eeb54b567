"""Anomaly detection over ``FitAnomalyDetector``, ``DetectAnomaly``, ``List``/``DeleteAnomalyDetector``.

Rows become protos, and scores JSON, off the event loop when the body is large
(:func:`gateway.json_body.off_loop_for_body`): 200,000 rows are seconds of Python.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from universal_runtime.v1 import anomaly_pb2 as pb

from gateway.calls import Rpc
from gateway.json_body import JsonBodyRoute, off_loop_for_body
from gateway.schemas.anomaly import DetectBody, FitBody
from gateway.translate.anomaly import detect_json, to_detect_request, to_fit_request, to_json

router = APIRouter(tags=["anomaly"], route_class=JsonBodyRoute)


@router.post("/v1/anomaly/fit")
async def fit_detector(body: FitBody, rpc: Rpc) -> dict[str, Any]:
    """Fit and save a named detector: ``{"detector", "version", "row_count", "threshold", "shared"}``.

    Raises:
        grpc.aio.AioRpcError: INVALID_ARGUMENT (400) for bad rows, names or settings;
            PERMISSION_DENIED (403) for ``shared`` from a key without role admin.

    """
    request = await off_loop_for_body(rpc.request, to_fit_request, body)
    return to_json(await rpc.unary(rpc.clients.inference.FitAnomalyDetector, request))


@router.post("/v1/anomaly/detect")
async def detect(body: DetectBody, rpc: Rpc) -> dict[str, Any]:
    """Score rows: ``{"scores": [...], "summary": {...}}``.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (404) for an unknown detector; INVALID_ARGUMENT (400).

    """
    request = await off_loop_for_body(rpc.request, to_detect_request, body)
    response = await rpc.unary(rpc.clients.inference.DetectAnomaly, request)
    return await off_loop_for_body(rpc.request, detect_json, response)  # a score per row


@router.get("/v1/anomaly/detectors")
async def list_detectors(rpc: Rpc) -> dict[str, Any]:
    """The detectors the key may use: ``{"object": "list", "data": [...], "unreadable": [names]}``.

    Its own and the shared ones (each with ``shared``); ``unreadable`` names saved detectors whose
    manifest cannot be read (left out of ``data``).
    """
    response = await rpc.unary(rpc.clients.inference.ListAnomalyDetectors, pb.ListAnomalyDetectorsRequest())
    return {
        "object": "list",
        "data": to_json(response).get("detectors", []),
        "unreadable": list(response.unreadable_detectors),
    }


@router.delete("/v1/anomaly/detectors/{name}")
async def delete_detector(name: str, rpc: Rpc, shared: bool = False) -> dict[str, Any]:
    """Delete every version of the key's own detector (``?shared=true``: the shared one).

    Answers ``{"detector", "versions_deleted", "deleted": true}``.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (404) for an unknown detector (or another key's);
            INVALID_ARGUMENT for a bad name; PERMISSION_DENIED (403) for ``shared`` from a key
            without role admin.

    """
    request = pb.DeleteAnomalyDetectorRequest(detector=name, shared=shared)
    response = await rpc.unary(rpc.clients.inference.DeleteAnomalyDetector, request)
    return {**to_json(response), "deleted": True}
