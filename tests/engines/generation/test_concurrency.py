"""Continuous batching on the GGUF engine: concurrent streams share steps and stay correct."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest
from universal_runtime.v1 import generation_pb2 as g

from tests.conftest import CHAT_MODEL, error_info
from tests.scrape import observations, scrape
from tests.streams import FinishedSequences, read_then_cancel

PROMPTS = [
    "Name a fruit.",
    "What colour is the sky?",
    "Write a haiku about snow.",
    "Give me a word that rhymes with cat.",
    "What is two plus two?",
    "Name a planet.",
    "Say hello in French.",
    "What do bees make?",
]


def chat(prompt: str, max_tokens: int = 24) -> g.GenerateStreamRequest:
    return g.GenerateStreamRequest(
        model=CHAT_MODEL,
        messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content=prompt)],
        parameters=g.GenerationParameters(max_tokens=max_tokens, temperature=0),
    )


async def stream_text(inference, request) -> tuple[str, int]:
    text, tokens = [], 0
    async for message in inference.GenerateStream(request):
        text.append(message.text)
        tokens += len(message.token_ids)
    return "".join(text), tokens


async def test_eight_concurrent_streams_match_their_solo_runs(inference):
    solo = [await stream_text(inference, chat(p)) for p in PROMPTS]
    before = scrape()
    together = await asyncio.gather(*(stream_text(inference, chat(p)) for p in PROMPTS))
    assert together == solo
    # Steps by batch size (ur_generation_batch_size has a bucket per size up to 8).
    sizes = observations(before, scrape(), "ur_generation_batch_size", model=CHAT_MODEL)
    assert max(sizes) == len(PROMPTS), f"the streams never shared a step: {sizes}"


async def test_cancelling_one_stream_frees_its_slot_and_spares_the_others(inference, server):
    engine = server.manager.get(CHAT_MODEL).engine
    expected = [await stream_text(inference, chat(p)) for p in PROMPTS[:3]]
    finished = FinishedSequences(CHAT_MODEL)
    long_call = inference.GenerateStream(
        g.GenerateStreamRequest(
            model=CHAT_MODEL,
            prompt="Count to one thousand: one, two, three,",
            parameters=g.GenerationParameters(max_tokens=1000, temperature=0),
        ),
        metadata=(("x-request-id", "batched-cancel"),),
    )
    others = asyncio.gather(*(stream_text(inference, chat(p)) for p in PROMPTS[:3]))
    await read_then_cancel(long_call, 4)
    assert await others == expected
    assert await finished.cancelled(1) < 100  # tokens the cancelled one generated
    assert engine.scheduler.active_count == 0


async def test_expired_deadline_is_deadline_exceeded_and_frees_the_slot(inference, server):
    request = g.GenerateStreamRequest(
        model=CHAT_MODEL,
        prompt="Count to one thousand: one, two,",
        parameters=g.GenerationParameters(max_tokens=1000, temperature=0),
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in inference.GenerateStream(request, timeout=0.5):
            pass
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # The model may still have been loading when the deadline passed (this test alone): wait for it.
    for _ in range(500):
        engine = server.manager.get(CHAT_MODEL).engine
        if engine is not None and engine.scheduler.active_count == 0:
            break
        await asyncio.sleep(0.02)
    # The cancelled sequence leaves at the batch's next step (bounded: 10 s on a loaded CI machine).
    assert engine is not None and engine.scheduler.active_count == 0
    text, _ = await stream_text(inference, chat("Name a fruit.", 4))
    assert text


async def test_full_queue_is_resource_exhausted_overloaded(inference, server):
    # "tiny-queue-chat" runs one sequence and lets one wait: the third concurrent request is refused.
    # The end-of-text tokens (ids 0-2) are banned so that neither stream can end on its own and free
    # its place before the third arrives.
    no_end = [g.LogitBias(token_id=token, bias=-100) for token in (0, 1, 2)]
    long = g.GenerateStreamRequest(
        model="tiny-queue-chat",
        prompt="Count: one, two,",
        parameters=g.GenerationParameters(max_tokens=200, logit_bias=no_end),
    )
    first = inference.GenerateStream(long)
    await first.read()
    second = inference.GenerateStream(long)
    await asyncio.sleep(0.2)  # let the second one queue
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in inference.GenerateStream(long):
            pass
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(caught.value).reason == "OVERLOADED"
    first.cancel()
    second.cancel()


async def test_running_streams_keep_producing_while_a_long_prompt_is_prefilled(inference, server):
    """A 2,000-token prompt is prefilled in chunks of ``step_prefill_tokens`` (128), one per step
    beside the running stream's token: the stream gets a token at every one of those ~16 steps
    instead of waiting for the whole prompt."""
    no_end = [g.LogitBias(token_id=token, bias=-100) for token in (0, 1, 2)]
    running = inference.GenerateStream(
        g.GenerateStreamRequest(
            model=CHAT_MODEL,
            prompt="Count to one thousand: one, two, three,",
            parameters=g.GenerationParameters(max_tokens=400, temperature=0, logit_bias=no_end),
        )
    )
    received = [0]  # tokens of the running stream read so far
    decoding = asyncio.Event()

    async def keep_reading() -> None:
        while (message := await running.read()) is not grpc.aio.EOF:
            received[0] += len(message.token_ids)
            if received[0] >= 3:
                decoding.set()

    reader = asyncio.create_task(keep_reading())
    try:
        await asyncio.wait_for(decoding.wait(), 60)
        engine = server.manager.get(CHAT_MODEL).engine
        # Unique words first, so no slot holds a cached prefix of it: ~2,000 tokens in all.
        long_prompt = f"{uuid.uuid4().hex} " + " ".join(f"w{i}" for i in range(505))
        prompt_tokens = len(engine.model.tokenize(long_prompt.encode(), add_bos=True, special=True))
        assert 1900 <= prompt_tokens <= 2030
        long_call = inference.GenerateStream(
            g.GenerateStreamRequest(
                model=CHAT_MODEL,
                prompt=long_prompt,
                parameters=g.GenerationParameters(max_tokens=4, temperature=0),
            )
        )
        at_send = received[0]
        first = await long_call.read()
        during = received[0] - at_send
        print(f"\nrunning stream: {during} tokens while a {prompt_tokens}-token prompt was prefilled")
        assert first.token_ids, "the long prompt's stream answered"
        assert during >= 10, f"the running stream got only {during} tokens during the prefill"
        long_call.cancel()
    finally:
        running.cancel()
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def test_a_decode_step_feeds_its_sequences_in_kv_stream_order(inference, server):
    # llama.cpp computes a batch whose tokens are out of its KV streams' order 1.5-1.9x slower;
    # the engine sorts each decode step by slot, whatever order the scheduler's list has.
    from engines.types import GenerationRequest, SamplingParams

    await stream_text(inference, chat(PROMPTS[0], max_tokens=2))  # loaded
    engine = server.manager.get(CHAT_MODEL).engine
    await engine.scheduler.drained()
    requests = [
        GenerationRequest(
            request_id=f"order-{i}", prompt=p, params=SamplingParams(max_tokens=4, temperature=0)
        )
        for i, p in enumerate(PROMPTS[:3])
    ]
    sequences = [await engine.executor.run(engine.prepare, r) for r in requests]
    fed: list[list[int]] = []
    stepper = engine._stepper
    real_decode = stepper.decode

    def recording_decode():
        batch = engine._batch.batch
        fed.append([batch.seq_id[i][0] for i in range(batch.n_tokens)])
        real_decode()

    stepper.decode = recording_decode
    try:
        await engine.executor.run(engine.step, sequences, [])  # prefills, one slot each
        slots = [s.engine_state.seq_id for s in sequences]
        fed.clear()
        await engine.executor.run(engine.step, sorted(sequences, key=lambda s: -s.engine_state.seq_id), [])
    finally:
        del stepper.decode
        await engine.executor.run(engine.release, sequences)
    assert len(set(slots)) == 3
    assert fed[0] == sorted(slots)
