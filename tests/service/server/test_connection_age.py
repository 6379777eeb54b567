"""UR_GRPC_MAX_CONNECTION_AGE_S: the server sends GOAWAY to old connections (so clients balancing
over a DNS name re-resolve it and find new replicas), without cutting a call in flight."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc as isg

from service.server import start_server
from tests.conftest import CHAT_MODEL

NO_END = [g.LogitBias(token_id=token, bias=-100) for token in (0, 1, 2)]


async def state_after(channel: grpc.aio.Channel, seconds: float) -> grpc.ChannelConnectivity:
    """The channel's state once ``seconds`` have passed or it left READY, whichever comes first."""
    deadline = time.monotonic() + seconds
    state = channel.get_state()
    while state == grpc.ChannelConnectivity.READY and time.monotonic() < deadline:
        try:
            await asyncio.wait_for(channel.wait_for_state_change(state), deadline - time.monotonic())
        except TimeoutError:
            break
        state = channel.get_state()
    return state


@contextlib.asynccontextmanager
async def channel_to_server(settings, max_connection_age_s: float) -> AsyncIterator[grpc.aio.Channel]:
    """A server with this connection age, and a channel to it (both closed on exit)."""
    update = {"grpc_port": 0, "grpc_max_connection_age_s": max_connection_age_s}
    running = await start_server(settings.model_copy(update=update))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            yield channel
    finally:
        await running.stop(grace=1.0)


async def test_old_connections_are_sent_away_and_calls_on_them_finish(settings):
    async with channel_to_server(settings, 1.0) as channel:
        stub = isg.InferenceServiceStub(channel)
        call = stub.GenerateStream(
            g.GenerateStreamRequest(
                model=CHAT_MODEL,
                prompt="Count:",
                parameters=g.GenerationParameters(max_tokens=60, logit_bias=NO_END),
            ),
            timeout=60,
        )
        started = time.monotonic()
        messages = [message async for message in call]
        # The stream outlived the connection's age and still ran to its length.
        assert messages[-1].finish_reason == g.FINISH_REASON_LENGTH
        assert messages[-1].usage.completion_tokens == 60
        assert await call.code() == grpc.StatusCode.OK
        print(f"\nstream of {time.monotonic() - started:.2f} s on a connection aged 1 s")

        # The connection is closed by the server (GOAWAY) once idle past its age: the channel
        # leaves READY, and the next call reconnects.
        assert await state_after(channel, 5.0) != grpc.ChannelConnectivity.READY
        health = health_pb2_grpc.HealthStub(channel)
        answer = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def test_without_an_age_connections_stay(settings):
    async with channel_to_server(settings, 0.0) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert await state_after(channel, 2.5) == grpc.ChannelConnectivity.READY
