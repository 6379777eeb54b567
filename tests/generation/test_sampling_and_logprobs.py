"""Sampling options, logprobs and n choices on the GGUF engine."""

from __future__ import annotations

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
    response = await inference.Generate(request(max_tokens=10, temperature=0.9, seed=5, n=3))
    assert [c.index for c in response.choices] == [0, 1, 2]
    assert (
        response.usage.completion_tokens
        == sum(
            (len(c.text) > 0 and 10) or 0
            for c in response.choices
            if c.finish_reason == g.FINISH_REASON_LENGTH
        )
        or response.usage.completion_tokens > 0
    )
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
