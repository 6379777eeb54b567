"""The queue-wait limit (``max_queue_wait_s``): a generation request that waited longer
for a slot gets RESOURCE_EXHAUSTED / QUEUE_WAIT_EXCEEDED at once, not a late answer, while the
stream holding the slot goes on."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc

from service.server import start_server
from tests.conftest import error_info

MODEL = "tiny-queue-chat"  # one sequence at a time, one waiting
LIMIT_S = 0.5
NO_END = [g.LogitBias(token_id=token, bias=-100) for token in (0, 1, 2)]


@pytest.fixture(scope="module")
async def inference(settings):
    running = await start_server(settings.model_copy(update={"grpc_port": 0, "max_queue_wait_s": LIMIT_S}))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield inference_service_pb2_grpc.InferenceServiceStub(channel)
    await running.stop(grace=1.0)


async def test_a_request_waiting_past_the_limit_is_refused_while_the_running_one_goes_on(inference):
    holder = inference.GenerateStream(
        g.GenerateStreamRequest(
            model=MODEL,
            prompt="Count: one, two,",
            parameters=g.GenerationParameters(max_tokens=400, logit_bias=NO_END),
        ),
        timeout=120,
    )
    first = await holder.read()  # the slot is taken
    assert first.token_ids
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(
            g.GenerateRequest(model=MODEL, prompt="Hi", parameters=g.GenerationParameters(max_tokens=2)),
            timeout=60,
        )
    waited = time.monotonic() - started
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    info = error_info(caught.value)
    assert info.reason == "QUEUE_WAIT_EXCEEDED"
    assert float(info.metadata["max_queue_wait_s"]) == LIMIT_S
    assert LIMIT_S <= waited < LIMIT_S + 10, (
        waited
    )  # refused near the limit, not after the holder's 400 tokens
    # The stream holding the slot was not disturbed.
    later = await asyncio.wait_for(holder.read(), timeout=30)
    assert later is not grpc.aio.EOF and later.token_ids
    holder.cancel()
