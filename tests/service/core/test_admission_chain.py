"""The admission chain in isolation: a fake servicer raises; the client sees the mapped status only.

The fake is served by the gRPC face over the real core and steps (:mod:`tests.service.core.core_server`):
request log, (concurrency), authentication, priority, error mapping.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc as isg

from engines.errors import InputTooLongError
from service.core.admission.authentication import Authentication
from service.core.admission.concurrency import ConcurrencyLimit
from service.shared.api_keys import load_api_keys
from tests.conftest import error_info
from tests.service.core.core_server import default_steps, grpc_server


class FakeInference(isg.InferenceServiceServicer):
    """Raises chosen errors; streams two messages before failing when asked."""

    async def Generate(self, request, ctx):
        if request.model == "secret-crash":
            raise RuntimeError("database password is hunter2")
        raise InputTooLongError(
            "prompt is 10 tokens but the context holds 5", prompt_tokens=10, context_length=5
        )

    async def GenerateStream(self, request, ctx):
        yield g.GenerateStreamResponse(text="a")
        yield g.GenerateStreamResponse(text="b")
        raise RuntimeError("boom after two tokens")


@pytest.fixture(scope="module")
async def fake_channel():
    server, _ = grpc_server(
        [lambda plane: isg.add_InferenceServiceServicer_to_server(FakeInference(), plane)],
        default_steps(Authentication(load_api_keys("k"))),
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield channel
    await server.stop(0)


AUTH = (("authorization", "Bearer k"),)


async def test_unexpected_error_is_internal_with_generic_message(fake_channel, caplog):
    stub = isg.InferenceServiceStub(fake_channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(
            g.GenerateRequest(model="secret-crash"), metadata=(*AUTH, ("x-request-id", "rid-1"))
        )
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert "hunter2" not in caught.value.details()
    assert "rid-1" in caught.value.details()
    assert error_info(caught.value).reason == "INTERNAL"
    assert "hunter2" in caplog.text  # the trace is in the server log


async def test_domain_error_keeps_its_code_reason_and_metadata(fake_channel):
    stub = isg.InferenceServiceStub(fake_channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(g.GenerateRequest(model="x"), metadata=AUTH)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(caught.value)
    assert info.reason == "INPUT_TOO_LONG"
    assert dict(info.metadata) == {"prompt_tokens": "10", "context_length": "5"}


async def test_stream_passes_messages_then_maps_the_error(fake_channel):
    stub = isg.InferenceServiceStub(fake_channel)
    call = stub.GenerateStream(g.GenerateStreamRequest(model="x"), metadata=AUTH)
    texts = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for message in call:
            texts.append(message.text)
    assert texts == ["a", "b"]
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert "boom" not in caught.value.details()


async def test_request_id_is_echoed_in_the_trailers_of_a_failed_unary_call(fake_channel):
    """Not in early headers: an unanswered unary call must stay uncommitted, so a client's retry
    policy can send it to another replica (docs/scale-out/client-balancing.md)."""
    stub = isg.InferenceServiceStub(fake_channel)
    call = stub.Generate(g.GenerateRequest(model="x"), metadata=(*AUTH, ("x-request-id", "abc-123")))
    with pytest.raises(grpc.aio.AioRpcError):
        await call
    assert ("x-request-id", "abc-123") in tuple(await call.trailing_metadata())
    assert ("x-request-id", "abc-123") not in tuple(await call.initial_metadata())


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer wrong"),)])
async def test_missing_or_wrong_api_key_is_unauthenticated(fake_channel, metadata):
    stub = isg.InferenceServiceStub(fake_channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(g.GenerateRequest(model="x"), metadata=metadata)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("header", ["Bearer k", "bearer k", "BEARER k", "bEaReR  k"])
async def test_bearer_scheme_is_case_insensitive(fake_channel, header):
    # RFC 7235 section 2.1: the scheme is case-insensitive, as the gateway already accepts.
    stub = isg.InferenceServiceStub(fake_channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(g.GenerateRequest(model="x"), metadata=(("authorization", header),))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # past auth, into the servicer


@pytest.mark.parametrize("header", ["k", "Basic k", "Bearerk", "Bearer", "Bearer kk", "Bearer K", "Token k"])
async def test_other_schemes_and_keys_stay_unauthenticated(fake_channel, header):
    stub = isg.InferenceServiceStub(fake_channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(g.GenerateRequest(model="x"), metadata=(("authorization", header),))
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_request_id_comes_back_in_trailers_of_unary_answers_and_headers_of_streams(inference):
    from universal_runtime.v1 import encoders_pb2 as e

    from tests.conftest import CHAT_MODEL, EMBED_MODEL

    unary = inference.Embed(
        e.EmbedRequest(model=EMBED_MODEL, inputs=["x"]), metadata=[("x-request-id", "u-1")]
    )
    await unary
    assert ("x-request-id", "u-1") in tuple(await unary.trailing_metadata())
    stream = inference.GenerateStream(
        g.GenerateStreamRequest(
            model=CHAT_MODEL, prompt="Hi", parameters=g.GenerationParameters(max_tokens=2)
        ),
        metadata=[("x-request-id", "s-1")],
    )
    assert ("x-request-id", "s-1") in tuple(await stream.initial_metadata())
    async for _ in stream:
        pass


class _SlowRecords(logging.Handler):
    """Keeps the ``rpc`` log lines, each written ``delay_s`` after it was asked for (a slow log sink)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "rpc":
            time.sleep(self.delay_s)
            self.records.append(record)


@pytest.fixture
def threaded_server():
    """The fake servicer behind the admission chain, on an event loop of its own thread (yields its port).

    The client's loop is not the server's, so a status sent before the log line is written
    reaches the client while the server is still writing it.
    """
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict = {}

    async def serve():
        server, _ = grpc_server(
            [lambda plane: isg.add_InferenceServiceServicer_to_server(FakeInference(), plane)],
            default_steps(ConcurrencyLimit(1), Authentication(load_api_keys("k"))),
        )
        holder["port"] = server.add_insecure_port("127.0.0.1:0")
        holder["server"] = server
        await server.start()
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop).result(timeout=10)
    assert started.wait(10)
    yield holder["port"]
    asyncio.run_coroutine_threadsafe(holder["server"].stop(0), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


async def _failed_unary(stub):
    await stub.Generate(g.GenerateRequest(model="x"), metadata=AUTH)


async def _failed_stream(stub):
    async for _ in stub.GenerateStream(g.GenerateStreamRequest(model="x"), metadata=AUTH):
        pass


async def _refused_key(stub):
    await stub.Generate(g.GenerateRequest(model="x"), metadata=(("authorization", "Bearer wrong"),))


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (_failed_unary, grpc.StatusCode.INVALID_ARGUMENT),
        (_failed_stream, grpc.StatusCode.INTERNAL),
        (_refused_key, grpc.StatusCode.UNAUTHENTICATED),
    ],
)
async def test_the_log_line_is_written_before_the_client_sees_the_error(threaded_server, call, code):
    """A failed call's status goes out after its log line (and metrics): the face sets it once the chain returned."""
    sink = _SlowRecords(delay_s=0.5)
    rpc_log = logging.getLogger("universal_runtime.rpc")
    rpc_log.addHandler(sink)
    level = rpc_log.level
    rpc_log.setLevel(logging.INFO)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{threaded_server}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call(isg.InferenceServiceStub(channel))
            assert caught.value.code() == code
            assert [r.code for r in sink.records] == [code.name]
    finally:
        rpc_log.removeHandler(sink)
        rpc_log.setLevel(level)


# -- gRPC's own services (health) through the same chain ------------------------------------------


@pytest.fixture(params=[True, False], ids=["public-health", "guarded-health"])
async def health_server(request):
    """A gRPC server with health (SERVING) behind the key check; ``auth_public_health`` as the param."""
    servicer = health.aio.HealthServicer()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    limit = ConcurrencyLimit(1)
    server, _ = grpc_server(
        [lambda plane: isg.add_InferenceServiceServicer_to_server(FakeInference(), plane)],
        default_steps(limit, Authentication(load_api_keys("k"), public_health=request.param)),
        native=[lambda face: health_pb2_grpc.add_HealthServicer_to_server(servicer, face)],
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield channel, request.param, limit
    await server.stop(0)


async def test_health_needs_a_key_only_when_auth_public_health_is_off(health_server, caplog):
    channel, public, limit = health_server
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    stub = health_pb2_grpc.HealthStub(channel)
    if public:
        answer = await stub.Check(health_pb2.HealthCheckRequest())
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    else:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Check(health_pb2.HealthCheckRequest())
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert error_info(caught.value).reason == "UNAUTHENTICATED"
    answer = await stub.Check(health_pb2.HealthCheckRequest(), metadata=AUTH)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    # Its own abort (an unknown service) keeps its status, and its log line says so.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Check(health_pb2.HealthCheckRequest(service="nope"), metadata=AUTH)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    codes = [getattr(r, "code", None) for r in caplog.records if r.getMessage() == "rpc"]
    assert codes[-1] == "NOT_FOUND"
    assert limit.in_flight == 0  # health is neither counted nor limited


async def test_a_full_server_still_answers_health(health_server):
    channel, _, limit = health_server
    limit.in_flight = limit.max_in_flight  # full, as while a call runs
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await isg.InferenceServiceStub(channel).Generate(g.GenerateRequest(model="x"), metadata=AUTH)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error_info(caught.value).reason == "OVERLOADED"
        answer = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), metadata=AUTH
        )
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        limit.in_flight = 0
