"""Prompt-prefix reuse on the GGUF engine (catalog option prefix_cache_block)."""

from __future__ import annotations

import asyncio

from universal_runtime.v1 import generation_pb2 as g

from engines.generation.prefix_cache import PrefixCache

MODEL = "smollm2-prefix-cache"


def ask(question: str) -> g.GenerateRequest:
    return g.GenerateRequest(
        model=MODEL,
        messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content=question)],
        parameters=g.GenerationParameters(max_tokens=12, temperature=0),
    )


async def test_shared_system_prompt_is_reused_across_requests(inference, server):
    await inference.Generate(ask("Name a fruit."))
    engine = server.manager.get(MODEL).engine
    before = engine.reused_prompt_tokens
    second = await inference.Generate(ask("Name a vegetable."))
    # SmolLM2's template adds the same system prompt to both: its whole blocks are reused.
    assert engine.reused_prompt_tokens - before >= 16
    assert second.choices[0].text


async def test_concurrent_requests_with_reuse_all_complete(inference):
    responses = await asyncio.gather(
        *(inference.Generate(ask(f"Give me fact number {i}.")) for i in range(6))
    )
    assert all(r.choices[0].text and r.usage.completion_tokens > 0 for r in responses)


def test_plan_reuses_whole_blocks_only_and_keeps_one_token_to_decode():
    cache = PrefixCache(slots=2, block=4)
    first = cache.acquire(list(range(10)))
    assert (first.reused, first.source) == (0, None)
    cache.record(first.slot, list(range(10)))
    cache.release(first.slot, list(range(10)))
    # Same 10 tokens again: 8 reusable (two blocks), not 10 — the last block must be decoded.
    again = cache.acquire(list(range(10)))
    assert again.reused == 8
    cache.release(again.slot, [])
    # A prompt sharing 6 tokens reuses one block (4).
    other = cache.acquire([0, 1, 2, 3, 4, 5, 99, 98, 97])
    assert other.reused == 4


def test_disabled_cache_never_reuses():
    cache = PrefixCache(slots=1, block=0)
    plan = cache.acquire([1, 2, 3, 4, 5])
    cache.release(plan.slot, [1, 2, 3, 4, 5])
    assert cache.acquire([1, 2, 3, 4, 5]).reused == 0
    assert cache.chunk_end(0, 100, 512) == 100
