"""Admission under bursts on real models: 200 simultaneous calls against small queues.

Every admitted call completes, every other one is refused at once with RESOURCE_EXHAUSTED /
OVERLOADED, and no call runs into its deadline. The exact-count tests hold the device (or the
tokenizer) while the burst arrives, so that the count does not depend on how fast the first
calls finish: a place is taken before any work, so exactly the places are admitted.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import grpc
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g

from tests.conftest import TEST_CATALOG, error_info

BURST = 200
CALL_TIMEOUT_S = 60.0  # every call has a deadline; one that runs into it fails the test
CHAT, EMBED = "burst-chat", "minilm-burst"
_CHAT_OPTIONS = TEST_CATALOG["models"][CHAT]["options"]
GENERATION_PLACES = _CHAT_OPTIONS["max_sequences"] + _CHAT_OPTIONS["max_waiting"]  # 2 running + 8 waiting
EMBED_PLACES = TEST_CATALOG["models"][EMBED]["options"]["max_queue"]  # 8 single-input calls


async def generate(inference, i: int) -> list[g.GenerateStreamResponse]:
    request = g.GenerateStreamRequest(
        model=CHAT, prompt=f"Count from {i}:", parameters=g.GenerationParameters(max_tokens=8, temperature=0)
    )
    return [message async for message in inference.GenerateStream(request, timeout=CALL_TIMEOUT_S)]


async def embed(inference, text: str) -> e.EmbedResponse:
    return await inference.Embed(e.EmbedRequest(model=EMBED, inputs=[text]), timeout=CALL_TIMEOUT_S)


def outcomes(results: list) -> tuple[list, list]:
    """(completed, refused) results; anything else, a deadline included, fails the test."""
    completed, refused = [], []
    for result in results:
        if isinstance(result, grpc.aio.AioRpcError):
            assert result.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, result
            assert error_info(result).reason == "OVERLOADED"
            refused.append(result)
        elif isinstance(result, BaseException):
            raise result
        else:
            completed.append(result)
    return completed, refused


async def until_done(calls: list[asyncio.Future], count: int) -> list[asyncio.Future]:
    """The calls done once ``count`` of them are (or after 30 s)."""
    for _ in range(3000):
        if sum(call.done() for call in calls) >= count:
            break
        await asyncio.sleep(0.01)
    return [call for call in calls if call.done()]


@contextlib.asynccontextmanager
async def device_held(executor):
    """Keep a device executor busy: no prepare or step runs until the block ends."""
    gate = threading.Event()
    blocker = asyncio.ensure_future(executor.run(gate.wait, CALL_TIMEOUT_S))
    try:
        yield
    finally:
        gate.set()
        await blocker


def assert_finished(streams: list[list[g.GenerateStreamResponse]]) -> None:
    for messages in streams:
        assert messages[-1].finish_reason in (g.FINISH_REASON_STOP, g.FINISH_REASON_LENGTH)
        assert messages[-1].usage.completion_tokens > 0


async def test_a_generate_stream_burst_admits_exactly_running_plus_waiting(inference, server):
    assert_finished([await generate(inference, 0)])  # loads the model
    scheduler = server.manager.get(CHAT).engine.scheduler
    started = time.monotonic()
    async with device_held(server.manager.get(CHAT).engine.executor):
        calls = [asyncio.ensure_future(generate(inference, i)) for i in range(BURST)]
        early = await until_done(calls, BURST - GENERATION_PLACES)
        # Refused while no prompt could be tokenized: refusal does not wait for any work.
        assert len(early) == BURST - GENERATION_PLACES
        assert scheduler.admitted_count == GENERATION_PLACES
    completed, refused = outcomes(await asyncio.gather(*calls, return_exceptions=True))
    assert len(refused) == BURST - GENERATION_PLACES == 190
    assert len(completed) == GENERATION_PLACES
    assert_finished(completed)
    assert time.monotonic() - started < CALL_TIMEOUT_S
    assert scheduler.admitted_count == 0


async def test_a_free_running_generate_stream_burst_never_times_out(inference, server):
    await generate(inference, 0)
    started = time.monotonic()
    results = await asyncio.gather(*(generate(inference, i) for i in range(BURST)), return_exceptions=True)
    completed, refused = outcomes(results)
    print(f"generate burst: {len(completed)} completed, {len(refused)} refused")
    # Calls finishing during the burst free places for later ones, so only bounds hold here.
    assert len(completed) >= GENERATION_PLACES and refused
    assert_finished(completed)
    assert time.monotonic() - started < CALL_TIMEOUT_S


async def test_an_embed_burst_is_refused_before_tokenizing(inference, server, monkeypatch):
    await embed(inference, "load the model")
    tokens = server.manager.get(EMBED).engine.tokens
    gate, tokenized = threading.Event(), []
    real_encode = tokens.encode

    def gated_encode(texts, *args, **kwargs):
        tokenized.append(len(texts))
        gate.wait(CALL_TIMEOUT_S)
        return real_encode(texts, *args, **kwargs)

    monkeypatch.setattr(tokens, "encode", gated_encode)
    # Held tokenizing must happen in worker threads: a small request is otherwise counted on the loop.
    monkeypatch.setattr("engines.batching.tokens.INLINE_CHARS", 0)
    started = time.monotonic()
    calls = [asyncio.ensure_future(embed(inference, f"text {i}")) for i in range(BURST)]
    try:
        early = await until_done(calls, BURST - EMBED_PLACES)
        assert len(early) == BURST - EMBED_PLACES
        assert len(tokenized) <= EMBED_PLACES  # the refused were never tokenized
    finally:
        gate.set()
    completed, refused = outcomes(await asyncio.gather(*calls, return_exceptions=True))
    assert len(refused) == BURST - EMBED_PLACES == 192
    assert len(completed) == EMBED_PLACES and sum(tokenized) == EMBED_PLACES
    assert all(len(response.embeddings) == 1 for response in completed)
    assert time.monotonic() - started < CALL_TIMEOUT_S


async def test_a_free_running_embed_burst_never_times_out(inference):
    await embed(inference, "load the model")
    started = time.monotonic()
    results = await asyncio.gather(
        *(embed(inference, f"text {i}") for i in range(BURST)), return_exceptions=True
    )
    completed, refused = outcomes(results)
    print(f"embed burst: {len(completed)} completed, {len(refused)} refused")
    assert len(completed) >= EMBED_PLACES
    assert time.monotonic() - started < CALL_TIMEOUT_S
