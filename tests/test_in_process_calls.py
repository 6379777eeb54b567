"""The gateway's in-process unary calls (service.in_process_calls): same answers, errors and bounds as gRPC.

The stubs here are built on ``server.in_process.channel(dead)``, where ``dead`` is a channel to a
port nobody listens on: a unary call that answers cannot have gone over the network.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc, model_service_pb2, model_service_pb2_grpc

from service.cli import gateway_app
from service.in_process_calls import InProcessCalls, InProcessChannel
from service.interceptors import AuthInterceptor, ErrorMappingInterceptor, RequestContextInterceptor
from service.shared.api_keys import load_api_keys
from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES, error_info, free_port


@pytest.fixture(scope="module")
async def dead_channel():
    async with grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}") as channel:
        yield channel


@pytest.fixture(scope="module")
def local(server, dead_channel):
    return server.in_process.channel(dead_channel)


@pytest.fixture(scope="module")
def local_inference(local):
    return inference_service_pb2_grpc.InferenceServiceStub(local)


async def test_unary_calls_answer_without_the_network(server, local, local_inference, inference):
    request = e.EmbedRequest(model=EMBED_MODEL, inputs=["one sentence", "and another"])
    assert await local_inference.Embed(request) == await inference.Embed(request)
    listed = await model_service_pb2_grpc.ModelServiceStub(local).ListModels(
        model_service_pb2.ListModelsRequest()
    )
    assert EMBED_MODEL in [model.name for model in listed.models]
    checked = await health_pb2_grpc.HealthStub(local).Check(health_pb2.HealthCheckRequest())
    assert checked.status == health_pb2.HealthCheckResponse.SERVING


BAD_REQUESTS = [
    e.EmbedRequest(model="no-such-model", inputs=["x"]),
    e.EmbedRequest(model=EMBED_MODEL, inputs=[]),
    e.EmbedRequest(model=EMBED_MODEL, inputs=["x" * 10_000], truncation=e.TRUNCATION_POLICY_ERROR),
    e.EmbedRequest(model="Bad Name!", inputs=["x"]),
]


@pytest.mark.parametrize("request_message", BAD_REQUESTS, ids=["unknown", "empty", "too-long", "bad-name"])
async def test_errors_are_the_ones_grpc_gives(local_inference, inference, request_message):
    with pytest.raises(grpc.aio.AioRpcError) as remote:
        await inference.Embed(request_message)
    with pytest.raises(grpc.aio.AioRpcError) as in_process:
        await local_inference.Embed(request_message)
    assert in_process.value.code() == remote.value.code()
    assert in_process.value.details() == remote.value.details()
    assert error_info(in_process.value) == error_info(remote.value)


async def test_a_request_over_the_receive_limit_is_refused_before_any_work(local_inference):
    huge = e.EmbedRequest(model=EMBED_MODEL, inputs=["x" * (MAX_MESSAGE_BYTES + 1)])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await local_inference.Embed(huge)
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in caught.value.details()


def counting(max_tokens: int, kind=g.GenerateRequest):
    """A raw prompt the model goes on counting from: it runs to ``max_tokens``."""
    parameters = g.GenerationParameters(max_tokens=max_tokens, temperature=0.0)
    return kind(model=CHAT_MODEL, prompt="1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", parameters=parameters)


async def test_a_deadline_ends_the_call_with_deadline_exceeded(local_inference):
    await local_inference.Generate(counting(1))  # loaded: the deadline falls on the generation itself
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await local_inference.Generate(counting(512), timeout=0.05)
    assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED


async def test_a_cancelled_call_cancels_the_servicer_and_logs_cancelled(local_inference, caplog):
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    call = local_inference.Generate(counting(512))
    await asyncio.sleep(0.3)
    assert call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.sleep(0)
    codes = [getattr(record, "code", None) for record in caplog.records if record.getMessage() == "rpc"]
    assert codes[-1] == "CANCELLED"
    answer = await local_inference.Generate(counting(4))  # the model is free again
    assert answer.choices[0].text


async def test_streams_keep_the_real_channel(server, dead_channel, inference):
    live = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        stub = inference_service_pb2_grpc.InferenceServiceStub(server.in_process.channel(live))
        chunks = [chunk async for chunk in stub.GenerateStream(counting(4, g.GenerateStreamRequest))]
        assert chunks
        dead_stub = inference_service_pb2_grpc.InferenceServiceStub(server.in_process.channel(dead_channel))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in dead_stub.GenerateStream(counting(4, g.GenerateStreamRequest), timeout=2):
                pass
        assert caught.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        await live.close()


# -- on their own: API keys, and what happens once the server stops -------------------------------


class RecordingChannel:
    """A remote channel that records the unary calls it is asked to make."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def unary_unary(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        async def remote(request, **call_kwargs):
            self.calls.append(method)
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.NOT_SERVING)

        return remote

    def unary_stream(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        return None  # Health.Watch: never called here


async def guarded_health_calls(max_send_bytes: int = 1024) -> InProcessCalls:
    interceptors = [
        RequestContextInterceptor(),
        AuthInterceptor(load_api_keys("sekrit", None), public_health=False),
        ErrorMappingInterceptor(),
    ]
    calls = InProcessCalls(interceptors, max_receive_bytes=1024, max_send_bytes=max_send_bytes)
    servicer = health.aio.HealthServicer()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, calls)
    return calls


async def test_api_keys_are_checked_in_process_too():
    calls = await guarded_health_calls()
    stub = health_pb2_grpc.HealthStub(calls.channel(RecordingChannel()))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Check(health_pb2.HealthCheckRequest())
    assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert error_info(caught.value).reason == "UNAUTHENTICATED"
    answer = await stub.Check(health_pb2.HealthCheckRequest(), metadata=(("authorization", "Bearer sekrit"),))
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def test_once_closed_new_calls_go_to_the_real_channel():
    calls = await guarded_health_calls()
    remote = RecordingChannel()
    stub = health_pb2_grpc.HealthStub(calls.channel(remote))
    await calls.close(grace=1.0)
    answer = await stub.Check(health_pb2.HealthCheckRequest())
    assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert remote.calls == ["/grpc.health.v1.Health/Check"]


async def test_an_answer_over_the_send_limit_is_refused():
    calls = await guarded_health_calls(max_send_bytes=1)  # SERVING is 2 bytes on the wire
    stub = health_pb2_grpc.HealthStub(calls.channel(RecordingChannel()))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Check(health_pb2.HealthCheckRequest(), metadata=(("authorization", "Bearer sekrit"),))
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max (2 vs. 1)" in caught.value.details()


@pytest.mark.parametrize(
    ("overrides", "in_process"),
    [
        ({}, True),
        ({"gateway_in_process_calls": False}, False),
        ({"otlp_endpoint": "http://127.0.0.1:4317"}, False),
    ],
    ids=["default", "turned-off", "tracing"],
)
async def test_the_gateway_beside_the_server_calls_in_process_unless_off_or_tracing(
    server, settings, overrides, in_process
):
    app = gateway_app(settings.model_copy(update=overrides), f"127.0.0.1:{server.port}", server.in_process)
    async with app.router.lifespan_context(app):
        assert isinstance(app.state.grpc.channel, InProcessChannel) is in_process
        answer = await app.state.grpc.health.Check(health_pb2.HealthCheckRequest())
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
