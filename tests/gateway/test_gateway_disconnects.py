"""Every route's gRPC call is cancelled when the HTTP client goes away, not only generation's.

A server whose every method hangs until cancelled stands behind a real uvicorn; the client sends
one request, waits until the server got it, then drops the connection.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2_grpc
from universal_runtime.v1 import inference_service_pb2_grpc, model_service_pb2_grpc

from gateway.app import create_app
from tests.gateway.gateway_fakes import serve_with_uvicorn


class Hang:
    """Records that a call arrived, then waits until the client cancels it."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def __call__(self) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


class _Hanging:
    def __init__(self, hang: Hang) -> None:
        self.hang = hang


async def _hang_unary(self: _Hanging, request, context) -> None:
    await self.hang()


class HangingInference(_Hanging, inference_service_pb2_grpc.InferenceServiceServicer):
    ListClassifiers = DeleteClassifier = ListAnomalyDetectors = DeleteAnomalyDetector = _hang_unary

    async def Ocr(self, request_iterator, context):
        async for _ in request_iterator:
            pass
        await self.hang()
        yield  # an async generator, as a stream-stream handler

    AnalyzeDocument = Ocr

    async def _hang_upload(self, request_iterator, context) -> None:
        async for _ in request_iterator:
            pass
        await self.hang()

    AskDocument = ExtractDocument = ClassifyDocument = _hang_upload


class HangingModels(_Hanging, model_service_pb2_grpc.ModelServiceServicer):
    ListModels = GetModel = _hang_unary


class HangingHealth(_Hanging, health_pb2_grpc.HealthServicer):
    Check = _hang_unary


@contextlib.asynccontextmanager
async def hanging_server(hang: Hang) -> AsyncIterator[str]:
    server = grpc.aio.server()
    inference_service_pb2_grpc.add_InferenceServiceServicer_to_server(HangingInference(hang), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(HangingModels(hang), server)
    health_pb2_grpc.add_HealthServicer_to_server(HangingHealth(hang), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


OCR_BODY = {"file": base64.b64encode(b"\x89PNG\r\n\x1a\n not really").decode()}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/classifiers", None),
        ("DELETE", "/v1/classifiers/some-name", None),
        ("GET", "/v1/models", None),
        ("GET", "/v1/models/org/model", None),
        ("GET", "/v1/anomaly/detectors", None),
        ("DELETE", "/v1/anomaly/detectors/some-name", None),
        ("POST", "/v1/ocr", OCR_BODY),
        ("POST", "/v1/documents/analyze", OCR_BODY),
        ("POST", "/v1/documents/ask", {**OCR_BODY, "question": "What is it?"}),
        ("POST", "/v1/documents/extract", OCR_BODY),
        ("POST", "/v1/documents/classify", OCR_BODY),
        ("GET", "/health", None),
    ],
)
async def test_client_disconnect_cancels_the_call(method: str, path: str, body: dict | None) -> None:
    hang = Hang()
    async with (
        hanging_server(hang) as target,
        serve_with_uvicorn(create_app(target)) as base_url,
        httpx.AsyncClient(base_url=base_url) as http,
    ):
        request = asyncio.create_task(http.request(method, path, json=body))
        await asyncio.wait_for(hang.started.wait(), 5)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        await asyncio.wait_for(hang.cancelled.wait(), 5)
