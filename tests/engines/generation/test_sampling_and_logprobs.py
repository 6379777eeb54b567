"""Sampling options, logprobs and n choices on the GGUF engine."""

from __future__ import annotations

import math
from collections import Counter

import grpc
import pytest
from universal_runtime.v1 import generation_pb2 as g

from tests.conftest import CHAT_MODEL

ASK = [g.ChatMessage(role=g.CHAT_ROLE_USER, content="Write one sentence about the sea.")]


def request(**params) -> g.GenerateRequest:
    return g.GenerateRequest(model=CHAT_MODEL, messages=ASK, parameters=g.GenerationParameters(**params))


async def test_logprobs_are_log_probabilities_and_top_includes_the_greedy_token(inference):
    response = await inference.Generate(request(max_tokens=12, temperature=0, logprobs=True, top_logprobs=5))
    scored = response.choices[0].logprobs
    assert len(scored) == response.usage.completion_tokens
    for entry in scored:
        assert entry.sampled.logprob <= 0
        values = [t.logprob for t in entry.top_logprobs]
        assert len(values) == 5
        assert values == sorted(values, reverse=True)
        assert all(v <= 0 for v in values)
        # Greedy: the sampled token is the most likely one.
        assert entry.top_logprobs[0].token_id == entry.sampled.token_id


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 0.9, "top_k": 20, "seed": 11},
        {"temperature": 0.7, "top_p": 0.8, "seed": 12},
        {"temperature": 1.0, "min_p": 0.1, "seed": 13},
        {
            "temperature": 0.8,
            "repetition_penalty": 1.3,
            "presence_penalty": 0.5,
            "frequency_penalty": 0.5,
            "seed": 14,
        },
    ],
)
async def test_same_seed_same_text_for_each_sampler(inference, params):
    first = await inference.Generate(request(max_tokens=20, **params))
    second = await inference.Generate(request(max_tokens=20, **params))
    assert first.choices[0].text == second.choices[0].text


async def test_different_seeds_differ(inference):
    texts = {
        (await inference.Generate(request(max_tokens=20, temperature=1.0, seed=s))).choices[0].text
        for s in range(4)
    }
    assert len(texts) > 1


# -- the sampler options against their definitions -------------------------------------------
#
# Logprobs are the model's raw distribution (before temperature and the sampler chain), so the
# tokens a filter allows can be read from them: top_k keeps the k most likely, top_p the
# smallest prefix of the ranking whose mass reaches p, min_p the tokens at least min_p times
# as likely as the best one.

HOT = 1.5
SEEDS = (1, 2)
SAMPLED_TOKENS = 12


async def scored(inference, **params) -> g.GenerateChoice:
    params.setdefault("max_tokens", SAMPLED_TOKENS)
    response = await inference.Generate(request(logprobs=True, top_logprobs=20, **params))
    (choice,) = response.choices
    assert len(choice.logprobs) == response.usage.completion_tokens > 0
    return choice


def token_ids(choice) -> list[int]:
    return [entry.sampled.token_id for entry in choice.logprobs]


@pytest.fixture(scope="module")
async def greedy_ids(inference) -> list[int]:
    return token_ids(await scored(inference, temperature=0))


def allowed_by_top_k(entry, k: int) -> bool:
    return entry.sampled.token_id in [t.token_id for t in entry.top_logprobs[:k]]


def allowed_by_top_p(entry, p: float) -> bool:
    before = 0.0  # probability mass ranked strictly above the sampled token
    for t in entry.top_logprobs:
        if t.token_id == entry.sampled.token_id:
            break
        before += math.exp(t.logprob)
    return before < p + 1e-6


def allowed_by_min_p(entry, m: float) -> bool:
    return entry.sampled.logprob >= entry.top_logprobs[0].logprob + math.log(m) - 1e-5


@pytest.fixture(scope="module")
async def free_choices(inference) -> dict[int, g.GenerateChoice]:
    """Hot sampling with no filter, per seed."""
    return {seed: await scored(inference, temperature=HOT, seed=seed) for seed in SEEDS}


def test_unrestricted_hot_sampling_leaves_the_greedy_path(free_choices, greedy_ids):
    # Without this the "restricted sampling equals greedy" checks below would prove nothing.
    for seed, choice in free_choices.items():
        assert token_ids(choice) != greedy_ids, seed


@pytest.mark.parametrize("restriction", [{"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1.0}])
async def test_a_filter_that_leaves_one_candidate_samples_the_greedy_tokens(
    inference, greedy_ids, restriction
):
    for seed in SEEDS:
        choice = await scored(inference, temperature=HOT, seed=seed, **restriction)
        assert token_ids(choice) == greedy_ids, seed
        for entry in choice.logprobs:
            assert entry.sampled.token_id == entry.top_logprobs[0].token_id


@pytest.mark.parametrize(
    ("restriction", "allowed"),
    [
        ({"top_k": 3}, lambda entry: allowed_by_top_k(entry, 3)),
        ({"top_p": 0.5}, lambda entry: allowed_by_top_p(entry, 0.5)),
        ({"min_p": 0.2}, lambda entry: allowed_by_min_p(entry, 0.2)),
    ],
    ids=["top_k", "top_p", "min_p"],
)
async def test_every_sampled_token_is_one_the_filter_allows(inference, free_choices, restriction, allowed):
    # The same seeds without the filter sample tokens it forbids, so the filter is exercised.
    assert not all(allowed(entry) for choice in free_choices.values() for entry in choice.logprobs)
    for seed in SEEDS:
        choice = await scored(inference, temperature=HOT, seed=seed, **restriction)
        for i, entry in enumerate(choice.logprobs):
            assert allowed(entry), (seed, i, entry)


REPEATS = "apple " * 24


def raw(prompt: str, **params) -> g.GenerateRequest:
    return g.GenerateRequest(model=CHAT_MODEL, prompt=prompt, parameters=g.GenerationParameters(**params))


def repeated(ids: list[int]) -> int:
    """Tokens that already occurred earlier in ``ids``."""
    return len(ids) - len(set(ids))


@pytest.fixture(scope="module")
async def plain_repeats(inference) -> g.GenerateChoice:
    """Greedy continuation of a repetitive prompt, with no penalty: it repeats itself."""
    response = await inference.Generate(
        raw(REPEATS, max_tokens=24, temperature=0, logprobs=True, top_logprobs=20)
    )
    assert repeated(token_ids(response.choices[0])) >= 12, response.choices[0].text
    return response.choices[0]


async def test_presence_and_frequency_penalties_follow_their_definition(inference, plain_repeats):
    # Greedy under penalties picks the argmax of logit - presence * [seen] - frequency * count,
    # counted over the tokens generated so far; the raw logprobs differ from the logits by a
    # constant per step, so the same argmax can be read from them.
    presence, frequency = 2.0, 1.0
    choice = (
        await inference.Generate(
            raw(
                REPEATS,
                max_tokens=24,
                temperature=0,
                presence_penalty=presence,
                frequency_penalty=frequency,
                logprobs=True,
                top_logprobs=20,
            )
        )
    ).choices[0]
    ids = token_ids(choice)
    assert repeated(ids) < repeated(token_ids(plain_repeats)), choice.text

    def penalized(token_id: int, logprob: float) -> float:
        count = seen[token_id]
        return logprob - (presence if count else 0.0) - frequency * count

    seen: Counter[int] = Counter()
    checked = 0
    for i, entry in enumerate(choice.logprobs):
        best = max(penalized(t.token_id, t.logprob) for t in entry.top_logprobs)
        # A token outside the listed 20 scores at most the 20th raw logprob: when the best
        # listed score beats that, it is the best of the whole vocabulary.
        if best >= entry.top_logprobs[-1].logprob:
            assert penalized(entry.sampled.token_id, entry.sampled.logprob) >= best - 1e-4, (i, entry)
            checked += 1
        seen[entry.sampled.token_id] += 1
    assert checked >= len(ids) // 2


async def test_repetition_penalty_repeats_less(inference, plain_repeats):
    choice = (
        await inference.Generate(
            raw(REPEATS, max_tokens=24, temperature=0, repetition_penalty=2.0, logprobs=True)
        )
    ).choices[0]
    assert repeated(token_ids(choice)) < repeated(token_ids(plain_repeats)), choice.text


async def test_logit_bias_bans_a_token(inference):
    greedy = await inference.Generate(request(max_tokens=8, temperature=0, logprobs=True))
    first_token = greedy.choices[0].logprobs[0].sampled.token_id
    banned = await inference.Generate(
        request(
            max_tokens=8,
            temperature=0,
            logprobs=True,
            logit_bias=[g.LogitBias(token_id=first_token, bias=-100)],
        )
    )
    assert banned.choices[0].logprobs[0].sampled.token_id != first_token


async def test_n_choices_come_back_indexed_with_summed_usage(inference):
    single = await inference.Generate(request(max_tokens=10, temperature=0.9, seed=5))
    response = await inference.Generate(request(max_tokens=10, temperature=0.9, seed=5, n=3, logprobs=True))
    assert [c.index for c in response.choices] == [0, 1, 2]
    # One scored entry per generated token, so the choices' own lengths give the exact sum.
    lengths = [len(c.logprobs) for c in response.choices]
    for choice, length in zip(response.choices, lengths, strict=True):
        assert length > 0
        if choice.finish_reason == g.FINISH_REASON_LENGTH:
            assert length == 10
    assert response.usage.completion_tokens == sum(lengths)
    # The prompt is the same for every choice and is counted once.
    assert response.usage.prompt_tokens == single.usage.prompt_tokens > 0
    assert len({c.text for c in response.choices}) > 1
    again = await inference.Generate(request(max_tokens=10, temperature=0.9, seed=5, n=3))
    assert [c.text for c in again.choices] == [c.text for c in response.choices]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"n": 100}, "parameters.n"),
        ({"top_logprobs": 3}, "parameters.top_logprobs"),
        ({"logprobs": True, "top_logprobs": 50}, "parameters.top_logprobs"),
        ({"logit_bias": [g.LogitBias(token_id=1, bias=500)]}, "parameters.logit_bias"),
        ({"logit_bias": [g.LogitBias(token_id=10**8, bias=5)]}, "parameters.logit_bias"),
    ],
)
async def test_bad_sampling_options(inference, params, field):
    from tests.conftest import error_info

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(request(max_tokens=4, **params))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == field


@pytest.mark.parametrize("bias", [{}, {504: -100.0, 28: 5.0, 7: 2.5}])
async def test_the_greedy_fast_path_picks_what_llama_cpp_greedy_chain_picks(inference, server, bias):
    """Greedy requests skip llama.cpp's sampler chain (ArgmaxSampler); on the same logits rows
    both pick the same token, logit biases included."""
    from llama_cpp._internals import LlamaSampler

    from engines.generation.llama_cpp_sampling import ArgmaxSampler
    from engines.types import GenerationRequest, SamplingParams

    await inference.Generate(request(max_tokens=1, temperature=0))  # loaded
    engine = server.manager.get(CHAT_MODEL).engine

    def compare() -> list[tuple[int, int]]:
        params = SamplingParams(max_tokens=6, temperature=0, logit_bias=bias)
        sequence = engine.prepare(GenerationRequest(request_id="argmax", prompt="The sea is", params=params))
        assert isinstance(sequence.engine_state.sampler, ArgmaxSampler)
        chain = LlamaSampler()
        if bias:
            chain.add_logit_bias(engine.vocab_size, bias)
        chain.add_greedy()
        picks = []
        try:
            for _ in range(6):
                for _, token, _ in engine.step([sequence], []):
                    # The row just sampled is the last one the step decoded with logits.
                    picks.append((token, chain.sample(engine.ctx, engine._batch.batch.n_tokens - 1)))
        finally:
            chain.close()
            engine.release([sequence])
        return picks

    picks = await engine.executor.run(compare)
    assert len(picks) == 6
    assert all(fast == reference for fast, reference in picks), picks
