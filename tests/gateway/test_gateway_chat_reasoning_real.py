"""Chat Completions reasoning through the OpenAI Python SDK, the real gateway and the real server.

The think model (:data:`tests.conftest.THINK_MODEL`: the default GGUF with a chat template that
opens a think block, effort budgets of a few tokens) really generates its thinking; the engine
splits it out and the gateway returns it as ``message.reasoning_content`` (streamed:
``delta.reasoning_content``), the field vLLM, llama.cpp's server and DeepSeek's API use. The SDK
has no attribute for it, so it is read from ``model_extra`` as a client does.
"""

from __future__ import annotations

import openai
import pytest

from tests.conftest import THINK_EFFORT_BUDGETS, THINK_MODEL

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
MARKERS = ("<think>", "</think>")
#: Enough for a low-effort thought (6 tokens) and a few answer tokens.
MAX_TOKENS = 24


@pytest.fixture
async def sdk(gateway_url):
    async with openai.AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key="unused", max_retries=0) as client:
        yield client


async def ask(sdk, **extra):
    return await sdk.chat.completions.create(
        model=THINK_MODEL, messages=QUESTION, max_tokens=MAX_TOKENS, temperature=0, **extra
    )


async def test_thinking_comes_back_as_reasoning_content_within_the_effort_budget(sdk):
    answer = await ask(sdk, reasoning_effort="low")
    message = answer.choices[0].message
    thought = (message.model_extra or {}).get("reasoning_content")
    assert thought, message
    assert not any(marker in thought or marker in (message.content or "") for marker in MARKERS)
    reasoning_tokens = answer.usage.completion_tokens_details.reasoning_tokens
    assert 1 <= reasoning_tokens <= THINK_EFFORT_BUDGETS["low_budget"]
    assert answer.usage.completion_tokens > reasoning_tokens  # the model went on to answer
    assert answer.system_fingerprint and answer.system_fingerprint.startswith("fp_")


async def test_streamed_thinking_arrives_as_reasoning_deltas_before_the_answer(sdk):
    unary = await ask(sdk, reasoning_effort="low")
    stream = await ask(sdk, reasoning_effort="low", stream=True, stream_options={"include_usage": True})
    kinds: list[str] = []
    thought, content = "", ""
    async for chunk in stream:
        for choice in chunk.choices:
            piece = (choice.delta.model_extra or {}).get("reasoning_content")
            if piece:
                thought += piece
                kinds.append("reasoning")
            if choice.delta.content:
                content += choice.delta.content
                kinds.append("content")
        if chunk.usage is not None:
            usage = chunk.usage
    assert kinds and kinds[0] == "reasoning" and "reasoning" not in kinds[kinds.index("content") :]
    # Greedy: the stream thinks and answers as the unary call did.
    assert thought == unary.choices[0].message.model_extra["reasoning_content"]
    assert content == unary.choices[0].message.content
    assert (
        usage.completion_tokens_details.reasoning_tokens
        == unary.usage.completion_tokens_details.reasoning_tokens
    )


async def test_effort_none_and_budget_zero_turn_thinking_off(sdk):
    for extra in ({"reasoning_effort": "none"}, {"extra_body": {"reasoning_budget": 0}}):
        answer = await ask(sdk, **extra)
        message = answer.choices[0].message
        assert not (message.model_extra or {}).get("reasoning_content"), extra
        assert answer.usage.completion_tokens_details.reasoning_tokens == 0, extra
        assert message.content and not any(marker in message.content for marker in MARKERS)


async def test_an_explicit_budget_bounds_the_thinking(sdk):
    for name in ("reasoning_budget", "thinking_token_budget"):
        answer = await ask(sdk, extra_body={name: 3})
        assert 1 <= answer.usage.completion_tokens_details.reasoning_tokens <= 3, name


async def test_an_earlier_turns_reasoning_content_is_accepted(sdk):
    first = await ask(sdk, reasoning_effort="low")
    message = first.choices[0].message
    history = [
        *QUESTION,
        {
            "role": "assistant",
            "content": message.content,
            "reasoning_content": message.model_extra["reasoning_content"],
        },
        {"role": "user", "content": "And of Italy?"},
    ]
    answer = await sdk.chat.completions.create(
        model=THINK_MODEL, messages=history, max_tokens=MAX_TOKENS, temperature=0, reasoning_effort="low"
    )
    assert answer.choices[0].message.content is not None
    assert answer.usage.prompt_tokens > first.usage.prompt_tokens
