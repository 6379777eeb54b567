"""Standard health checking (overall and per service) and server reflection."""

from __future__ import annotations

from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc


async def test_health_serving_overall_and_per_service(channel):
    stub = health_pb2_grpc.HealthStub(channel)
    for service in ("", "universal_runtime.v1.InferenceService", "universal_runtime.v1.ModelService"):
        response = await stub.Check(health_pb2.HealthCheckRequest(service=service))
        assert response.status == health_pb2.HealthCheckResponse.SERVING, service


async def test_reflection_lists_both_services(channel):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    responses = [r async for r in stub.ServerReflectionInfo(iter([request]))]
    names = {s.name for s in responses[0].list_services_response.service}
    assert {"universal_runtime.v1.InferenceService", "universal_runtime.v1.ModelService"} <= names


async def test_reflection_resolves_the_contract(channel):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(
        file_containing_symbol="universal_runtime.v1.InferenceService"
    )
    responses = [r async for r in stub.ServerReflectionInfo(iter([request]))]
    assert responses[0].file_descriptor_response.file_descriptor_proto
