"""Graceful shutdown: health flips, new RPCs are refused, the in-flight stream finishes."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc as isg

from service.server import start_server
from tests.conftest import CHAT_MODEL


async def test_in_flight_stream_completes_and_new_rpcs_are_refused(settings):
    running = await start_server(settings.model_copy(update={"grpc_port": 0}))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        stub = isg.InferenceServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        call = stub.GenerateStream(
            g.GenerateStreamRequest(
                model=CHAT_MODEL,
                prompt="Once upon a time",
                # EOS ids 0-2 banned so the stream runs its full 40 tokens (sampling may pick EOS).
                parameters=g.GenerationParameters(
                    max_tokens=40, logit_bias=[g.LogitBias(token_id=t, bias=-100) for t in (0, 1, 2)]
                ),
            )
        )
        first = await call.read()
        assert first.text or first.token_ids

        watcher = health.Watch(health_pb2.HealthCheckRequest(service=""))
        assert (await watcher.read()).status == health_pb2.HealthCheckResponse.SERVING
        stopping = asyncio.create_task(running.stop(grace=5.0))
        assert (await watcher.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING

        rest = []
        while (message := await call.read()) is not grpc.aio.EOF:
            rest.append(message)
        assert rest[-1].finish_reason == g.FINISH_REASON_LENGTH
        assert rest[-1].usage.completion_tokens == 40
        assert len(first.token_ids) + sum(len(m.token_ids) for m in rest) == 40

        await stopping
        # Refused at once with UNAVAILABLE, the status clients retry elsewhere on; a call that
        # hangs until its deadline is not a refusal.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(g.GenerateRequest(model=CHAT_MODEL, prompt="hi"), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, caught.value
