"""Cancelling a stream stops its generation at the next token; other requests carry on."""

from __future__ import annotations

import asyncio

from universal_runtime.v1 import generation_pb2 as g

from tests.conftest import CHAT_MODEL
from tests.streams import FinishedSequences, read_then_cancel

LONG = g.GenerationParameters(max_tokens=400, temperature=0.7, seed=7)
COUNTING = "Count from one to five hundred in words, separated by commas: one, two, three,"


async def test_cancel_mid_stream_stops_generation_and_server_keeps_serving(inference):
    finished = FinishedSequences(CHAT_MODEL)
    call = inference.GenerateStream(
        g.GenerateStreamRequest(model=CHAT_MODEL, prompt=COUNTING, parameters=LONG),
        metadata=(("x-request-id", "cancel-me"),),
    )
    received = await read_then_cancel(call, 5)

    tokens = await finished.cancelled(1)
    # At most the step in flight when the cancel arrived runs after it.
    assert tokens <= received + 2
    await asyncio.sleep(0.3)
    assert finished.count("cancelled") == 1, "the cancelled sequence was counted twice"

    follow_up = await inference.Generate(
        g.GenerateRequest(model=CHAT_MODEL, prompt="Hello", parameters=g.GenerationParameters(max_tokens=4))
    )
    assert follow_up.usage.completion_tokens >= 1


async def test_cancelled_stream_does_not_block_the_next_request(inference):
    call = inference.GenerateStream(
        g.GenerateStreamRequest(model=CHAT_MODEL, prompt=COUNTING, parameters=LONG)
    )
    async for _ in call:
        break
    call.cancel()
    # The next request gets the slot at once instead of waiting for 400 tokens.
    response = await asyncio.wait_for(
        inference.Generate(
            g.GenerateRequest(model=CHAT_MODEL, prompt="Hi", parameters=g.GenerationParameters(max_tokens=4))
        ),
        timeout=3.0,
    )
    assert response.usage.completion_tokens >= 1
