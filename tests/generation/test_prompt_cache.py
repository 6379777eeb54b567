"""Prompt caching on the GGUF engine: reuse happens, and it never changes greedy output."""

from __future__ import annotations

import asyncio

from universal_runtime.v1 import generation_pb2 as g

from engines.generation.prompt_cache import PromptCache
from tests.conftest import CHAT_MODEL

COLD_MODEL = "smollm2-cold"  # the same GGUF with prompt_cache off: every prompt prefilled whole
QUESTIONS = [
    "Name a fruit.",
    "Name a vegetable.",
    "What is the capital of Italy?",
    "Write one sentence about the sea.",
    "What is two plus two?",
    "Give me a synonym of happy.",
]


def chat(model: str, messages: list[tuple[int, str]], request=g.GenerateRequest):
    return request(
        model=model,
        messages=[g.ChatMessage(role=role, content=text) for role, text in messages],
        parameters=g.GenerationParameters(max_tokens=40, temperature=0),
    )


async def answer(inference, model: str, messages: list[tuple[int, str]]) -> list[int]:
    """Greedy completion token ids."""
    stream = inference.GenerateStream(chat(model, messages, g.GenerateStreamRequest))
    return [token for message in [m async for m in stream] for token in message.token_ids]


async def test_reused_prefixes_give_the_same_greedy_tokens_as_cold_prefills(inference, server):
    engine_before = None
    warm = []
    for question in QUESTIONS:
        warm.append(await answer(inference, CHAT_MODEL, [(g.CHAT_ROLE_USER, question)]))
        if engine_before is None:
            engine = server.manager.get(CHAT_MODEL).engine
            engine_before = engine.reused_prompt_tokens
    # SmolLM2's template puts the same system prompt before every question: it was reused.
    assert engine.reused_prompt_tokens - engine_before >= 20 * (len(QUESTIONS) - 1)
    cold = [await answer(inference, COLD_MODEL, [(g.CHAT_ROLE_USER, q)]) for q in QUESTIONS]
    assert server.manager.get(COLD_MODEL).engine.reused_prompt_tokens == 0
    assert warm == cold


async def test_reuse_under_concurrency_gives_the_same_tokens(inference):
    # Sequences prefill and decode in shared batches while reusing their slots' prefixes.
    for _ in range(2):
        warm = await asyncio.gather(
            *(answer(inference, CHAT_MODEL, [(g.CHAT_ROLE_USER, q)]) for q in QUESTIONS)
        )
    cold = [await answer(inference, COLD_MODEL, [(g.CHAT_ROLE_USER, q)]) for q in QUESTIONS]
    assert list(warm) == cold


async def test_a_conversation_reuses_the_previous_turn(inference, server):
    first = [(g.CHAT_ROLE_USER, "Name three colors.")]
    response = await inference.Generate(chat(CHAT_MODEL, first))
    reply, first_prompt = response.choices[0].text, response.usage.prompt_tokens
    engine = server.manager.get(CHAT_MODEL).engine
    before = engine.reused_prompt_tokens
    second = [*first, (g.CHAT_ROLE_ASSISTANT, reply), (g.CHAT_ROLE_USER, "Which one is the darkest?")]
    warm = await answer(inference, CHAT_MODEL, second)
    # The first turn's prompt (system prompt and question) came from the cache; its answer is
    # prefilled again (completion cells are not reused).
    assert engine.reused_prompt_tokens - before >= first_prompt - 1
    assert warm == await answer(inference, COLD_MODEL, second)


def test_acquire_takes_the_slot_sharing_the_longest_prefix():
    cache = PromptCache(slots=3)
    plans = [cache.acquire(list(range(10))), cache.acquire([0, 1, 2, 50, 51]), cache.acquire([7, 8])]
    assert [p.reused for p in plans] == [0, 0, 0]
    cache.release(plans[0].slot, list(range(10)))
    cache.release(plans[1].slot, [0, 1, 2, 50, 51])
    cache.release(plans[2].slot, [7, 8])
    plan = cache.acquire([0, 1, 2, 50, 99])
    assert (plan.slot, plan.reused) == (plans[1].slot, 4)


def test_the_last_prompt_token_is_always_decoded():
    cache = PromptCache(slots=1)
    plan = cache.acquire([1, 2, 3])
    cache.release(plan.slot, [1, 2, 3, 4, 5])
    assert cache.acquire([1, 2, 3]).reused == 2


def test_a_prompt_sharing_nothing_takes_the_least_recently_released_slot():
    cache = PromptCache(slots=2)
    a, b = cache.acquire([1]), cache.acquire([2])
    cache.release(b.slot, [2, 2])
    cache.release(a.slot, [1, 1])
    assert cache.acquire([9, 9]).slot == b.slot


def test_disabled_cache_never_reuses():
    cache = PromptCache(slots=1, enabled=False)
    plan = cache.acquire([1, 2, 3, 4, 5])
    cache.release(plan.slot, [1, 2, 3, 4, 5])
    assert cache.acquire([1, 2, 3, 4, 5]).reused == 0
