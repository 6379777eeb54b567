"""Standard health checking (overall and per service) and server reflection."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pb2
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


async def _reflect(channel, version: str, request: reflection_pb2.ServerReflectionRequest):
    """One reflection exchange on ``grpc.reflection.<version>`` (v1 and v1alpha are wire-identical)."""
    call = channel.stream_stream(
        f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    return [response async for response in call(iter([request]), timeout=10)]


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_reflection_answers_v1_and_v1alpha(channel, version):
    [listed] = await _reflect(channel, version, reflection_pb2.ServerReflectionRequest(list_services=""))
    names = {s.name for s in listed.list_services_response.service}
    assert {
        "universal_runtime.v1.InferenceService",
        "universal_runtime.v1.ModelService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= names
    [found] = await _reflect(
        channel,
        version,
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="grpc.reflection.v1.ServerReflection"),
    )
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in found.file_descriptor_response.file_descriptor_proto
    ]
    [v1] = [f for f in files if f.package == "grpc.reflection.v1"]
    [service] = v1.service
    assert service.method[0].input_type == ".grpc.reflection.v1.ServerReflectionRequest"
