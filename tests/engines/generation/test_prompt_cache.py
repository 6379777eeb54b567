"""Prompt caching on the GGUF engine: reuse happens, and it never changes greedy output."""

from __future__ import annotations

import asyncio

from universal_runtime.v1 import generation_pb2 as g

from engines.generation.llama_cpp_step import prefill_chunk_end
from engines.generation.prompt_cache import PromptCache
from tests.conftest import CHAT_MODEL
from tests.scrape import moved, scrape, value

#: Prompt tokens served from a model's prompt cache, counted from each answer's usage.
CACHED = "ur_prompt_tokens_cached_total"
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
        parameters=g.GenerationParameters(max_tokens=40, temperature=0, logprobs=True),
    )


async def answer(inference, model: str, messages: list[tuple[int, str]]) -> list[tuple[int, float]]:
    """Greedy completion: (token id, its log probability) per token.

    Log probabilities come from the raw logits, so comparing them exactly also catches
    differences in the last bits that happen not to change a greedy token.
    """
    stream = inference.GenerateStream(chat(model, messages, g.GenerateStreamRequest))
    replies = [m async for m in stream]
    tokens = [t for m in replies for t in m.token_ids]
    logprobs = [lp.sampled.logprob for m in replies for lp in m.logprobs]
    return list(zip(tokens, logprobs, strict=True))


async def test_reused_prefixes_give_the_same_greedy_tokens_as_cold_prefills(inference, server):
    # Fill every slot first: new questions then reuse the cached system prompt of one of them
    # (while a slot is empty, a new prompt takes it and keeps the others' caches).
    await answer(inference, CHAT_MODEL, [(g.CHAT_ROLE_USER, "Filler question number 0?")])
    engine = server.manager.get(CHAT_MODEL).engine
    for i in range(1, engine.max_sequences):
        await answer(inference, CHAT_MODEL, [(g.CHAT_ROLE_USER, f"Filler question number {i}?")])
    before = scrape()
    warm = [await answer(inference, CHAT_MODEL, [(g.CHAT_ROLE_USER, q)]) for q in QUESTIONS]
    # SmolLM2's template puts the same system prompt before every question: it was reused.
    assert moved(before, scrape(), CACHED, model=CHAT_MODEL) >= 20 * len(QUESTIONS)
    cold = [await answer(inference, COLD_MODEL, [(g.CHAT_ROLE_USER, q)]) for q in QUESTIONS]
    assert value(scrape(), CACHED, model=COLD_MODEL) == 0  # never, in this process
    assert warm == cold


async def test_usage_reports_the_cached_prompt_tokens(inference):
    first = await inference.Generate(chat(CHAT_MODEL, [(g.CHAT_ROLE_USER, "Name a tree.")]))
    again = await inference.Generate(chat(CHAT_MODEL, [(g.CHAT_ROLE_USER, "Name a tree.")]))
    # The same prompt again: all of it but the last two tokens (prefilled together) is cached.
    assert again.usage.cached_prompt_tokens == again.usage.prompt_tokens - 2
    cold = await inference.Generate(chat(COLD_MODEL, [(g.CHAT_ROLE_USER, "Name a tree.")]))
    assert cold.usage.cached_prompt_tokens == 0 and cold.usage.prompt_tokens == again.usage.prompt_tokens
    assert first.choices[0].text == again.choices[0].text == cold.choices[0].text


async def test_reuse_under_concurrency_gives_the_same_tokens(inference):
    # Sequences prefill and decode in shared batches while reusing their slots' prefixes.
    for _ in range(2):
        warm = await asyncio.gather(
            *(answer(inference, CHAT_MODEL, [(g.CHAT_ROLE_USER, q)]) for q in QUESTIONS)
        )
    cold = [await answer(inference, COLD_MODEL, [(g.CHAT_ROLE_USER, q)]) for q in QUESTIONS]
    assert list(warm) == cold


async def test_prompts_prefilled_beside_running_streams_give_their_solo_tokens(inference):
    # Each question arrives while a long stream decodes, so its prefill shares steps with it.
    long = inference.GenerateStream(
        g.GenerateStreamRequest(
            model=CHAT_MODEL,
            prompt="Count to one thousand: one, two, three,",
            parameters=g.GenerationParameters(max_tokens=400, temperature=0),
        )
    )
    await long.read()
    beside = [await answer(inference, CHAT_MODEL, [(g.CHAT_ROLE_USER, q)]) for q in QUESTIONS[:3]]
    long.cancel()
    alone = [await answer(inference, COLD_MODEL, [(g.CHAT_ROLE_USER, q)]) for q in QUESTIONS[:3]]
    assert beside == alone


async def test_a_conversation_reuses_the_previous_turn(inference):
    first = [(g.CHAT_ROLE_USER, "Name three colors.")]
    response = await inference.Generate(chat(CHAT_MODEL, first))
    reply, first_prompt = response.choices[0].text, response.usage.prompt_tokens
    before = scrape()
    second = [*first, (g.CHAT_ROLE_ASSISTANT, reply), (g.CHAT_ROLE_USER, "Which one is the darkest?")]
    warm = await answer(inference, CHAT_MODEL, second)
    # The first turn's prompt (system prompt and question) came from the cache; its answer is
    # prefilled again (completion cells are not reused).
    assert moved(before, scrape(), CACHED, model=CHAT_MODEL) >= first_prompt - 2
    assert warm == await answer(inference, COLD_MODEL, second)


def test_acquire_takes_the_slot_sharing_the_longest_prefix():
    cache = PromptCache(slots=3)
    plans = [cache.acquire(list(range(10))), cache.acquire([0, 1, 2, 50, 51]), cache.acquire([7, 8])]
    assert [p.reused for p in plans] == [0, 0, 0]
    cache.release(plans[0].slot, list(range(10)))
    cache.release(plans[1].slot, [0, 1, 2, 50, 51])
    cache.release(plans[2].slot, [7, 8])
    plan = cache.acquire([0, 1, 2, 50, 99, 98, 97])
    assert (plan.slot, plan.reused) == (plans[1].slot, 4)


def test_an_empty_slot_is_taken_before_another_prompts_cache_is_overwritten():
    cache = PromptCache(slots=2)
    system = [1, 2, 3]
    first = cache.acquire([*system, 10, 11])
    cache.release(first.slot, [*system, 10, 11])
    # Reusing the system prompt from the first slot would drop its question: the empty slot
    # is taken, and the first question stays cached for its next use.
    second = cache.acquire([*system, 20, 21])
    assert (second.slot, second.reused) != (first.slot, 3) and second.reused == 0
    cache.release(second.slot, [*system, 20, 21])
    again = cache.acquire([*system, 10, 11, 12, 13])
    assert (again.slot, again.reused) == (first.slot, 5)


def test_a_conversation_extends_its_own_slot():
    cache = PromptCache(slots=2)
    a = cache.acquire([1, 2, 3, 4])
    b = cache.acquire([1, 2, 9])
    cache.release(a.slot, [1, 2, 3, 4])
    cache.release(b.slot, [1, 2, 9])
    turn = cache.acquire([1, 2, 3, 4, 5, 6, 7])
    assert (turn.slot, turn.reused) == (a.slot, 4)


def test_the_last_two_prompt_tokens_are_always_prefilled():
    cache = PromptCache(slots=1)
    plan = cache.acquire([1, 2, 3, 4])
    cache.release(plan.slot, [1, 2, 3, 4, 5])
    assert cache.acquire([1, 2, 3, 4]).reused == 2


def test_a_prompt_sharing_nothing_takes_the_least_recently_released_slot():
    cache = PromptCache(slots=2)
    a, b = cache.acquire([1]), cache.acquire([2])
    cache.release(b.slot, [2, 2])
    cache.release(a.slot, [1, 1])
    assert cache.acquire([9, 9]).slot == b.slot


def test_disabled_cache_never_reuses():
    cache = PromptCache(slots=1, enabled=False)
    plan = cache.acquire([1, 2, 3, 4, 5])
    assert cache.release(plan.slot, [1, 2, 3, 4, 5]) == 0  # the engine drops every cell
    assert cache.acquire([1, 2, 3, 4, 5]).reused == 0


def test_prefill_chunks_never_hold_or_leave_a_lone_token():
    assert prefill_chunk_end(0, 40, 512) == 40
    assert prefill_chunk_end(0, 1, 512) == 1  # a one-token prompt has no other way
    assert prefill_chunk_end(0, 513, 512) == 511  # leaves 2, not 1
    assert prefill_chunk_end(10, 13, 2) == 10  # 2 would leave 1, and 1 alone is no chunk
    assert prefill_chunk_end(10, 14, 2) == 12
    assert prefill_chunk_end(40, 40, 512) == 40
