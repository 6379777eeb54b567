"""The ``anthropic`` Python SDK → gateway ``/v1/messages`` → the real default chat model.

``messages.create``, ``messages.stream``, a tool round trip (the tool forced by ``tool_choice``,
as a 135M model would not choose it reliably: the test checks structure, not wit), and
``messages.count_tokens`` against the usage of the same request. Greedy decoding
(``temperature: 0``, an extra body field: see GREEDY) makes the streamed and the unary answer
comparable.
"""

from __future__ import annotations

import pytest

from tests.clients.conftest import require
from tests.conftest import CHAT_MODEL, THINK_EFFORT_BUDGETS, THINK_MODEL

require("anthropic")

import anthropic  # noqa: E402

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather of a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


# anthropic 2.14 has no sampling parameters (temperature, top_p, top_k) in its signatures; the
# API and this gateway still take them, so they travel as extra body fields.
GREEDY = {"extra_body": {"temperature": 0}}


@pytest.fixture
async def client(gateway_url):
    async with anthropic.AsyncAnthropic(base_url=gateway_url, api_key="unused", max_retries=0) as sdk:
        yield sdk


async def test_create(client):
    message = await client.messages.create(
        model=CHAT_MODEL, max_tokens=12, **GREEDY, system="Answer briefly.", messages=QUESTION
    )
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == CHAT_MODEL
    [block] = message.content
    assert block.type == "text" and block.text.strip()
    assert message.stop_reason in {"end_turn", "max_tokens"}
    assert 0 < message.usage.output_tokens <= 12
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) > 5


async def test_max_tokens_stop_reason(client):
    message = await client.messages.create(
        model=CHAT_MODEL,
        max_tokens=3,
        **GREEDY,
        messages=[{"role": "user", "content": "Write a long story about a dragon."}],
    )
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 3


async def test_stop_sequence(client):
    # Greedy text first, then stop on a word of it.
    free = await client.messages.create(model=CHAT_MODEL, max_tokens=16, **GREEDY, messages=QUESTION)
    text = free.content[0].text
    stop = text.split()[2]
    assert free.stop_sequence is None
    kwargs = {"model": CHAT_MODEL, "max_tokens": 16, **GREEDY, "messages": QUESTION, "stop_sequences": [stop]}
    stopped = await client.messages.create(**kwargs)
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", stop)
    assert stopped.content[0].text == text[: text.index(stop)]
    async with client.messages.stream(**kwargs) as stream:
        final = await stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)


async def test_stream_equals_create(client):
    kwargs = {"model": CHAT_MODEL, "max_tokens": 16, **GREEDY, "messages": QUESTION}
    unary = await client.messages.create(**kwargs)
    async with client.messages.stream(**kwargs) as stream:
        pieces = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert len(pieces) >= 3, "tokens must arrive as separate events"
    assert "".join(pieces) == final.content[0].text == unary.content[0].text
    assert final.stop_reason == unary.stop_reason
    assert final.usage.output_tokens == unary.usage.output_tokens
    # The input count arrives with message_delta (the contract reports usage at the end).
    total = final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)
    assert total == unary.usage.input_tokens + (unary.usage.cache_read_input_tokens or 0)


async def test_stream_events(client):
    async with client.messages.stream(model=CHAT_MODEL, max_tokens=8, **GREEDY, messages=QUESTION) as stream:
        kinds = [event.type async for event in stream]
    raw = [k for k in kinds if k not in ("text",)]  # the SDK adds "text" helper events
    assert raw[0] == "message_start"
    assert raw[1] == "content_block_start"
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"]


async def test_tool_round_trip(client):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    call = await client.messages.create(
        model=CHAT_MODEL,
        max_tokens=64,
        **GREEDY,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=messages,
    )
    assert call.stop_reason == "tool_use"
    [use] = [block for block in call.content if block.type == "tool_use"]
    assert use.id.startswith("toolu_") and use.name == "get_weather"
    assert isinstance(use.input, dict) and isinstance(use.input["city"], str)
    answer = await client.messages.create(
        model=CHAT_MODEL,
        max_tokens=24,
        **GREEDY,
        tools=[WEATHER_TOOL],
        messages=[
            *messages,
            {"role": "assistant", "content": call.content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 degrees."}],
            },
        ],
    )
    assert answer.stop_reason in {"end_turn", "max_tokens"}
    assert any(block.type == "text" and block.text.strip() for block in answer.content)


async def test_streamed_tool_use(client):
    async with client.messages.stream(
        model=CHAT_MODEL,
        max_tokens=64,
        **GREEDY,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "Weather in Rome?"}],
    ) as stream:
        final = await stream.get_final_message()
    assert final.stop_reason == "tool_use"
    uses = [block for block in final.content if block.type == "tool_use"]
    assert uses and uses[0].name == "get_weather" and isinstance(uses[0].input.get("city"), str)


async def test_count_tokens_equals_usage(client):
    # A prompt no other test sends, so the server's prefix cache has little of it.
    system = "You count sheep."
    messages = [
        {"role": "user", "content": "How many legs does a sheep have?"},
        {"role": "assistant", "content": "Four."},
        {"role": "user", "content": "And two sheep?"},
    ]
    counted = await client.messages.count_tokens(model=CHAT_MODEL, system=system, messages=messages)
    message = await client.messages.create(
        model=CHAT_MODEL, max_tokens=4, **GREEDY, system=system, messages=messages
    )
    # Anthropic's prompt size: input_tokens plus what was read from the cache.
    used = message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    assert counted.input_tokens == used > 10


async def test_errors_are_the_sdk_exceptions(client):
    with pytest.raises(anthropic.NotFoundError) as missing:
        await client.messages.create(model="no-such-model", max_tokens=4, messages=QUESTION)
    assert missing.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as bad:
        await client.messages.create(
            model=CHAT_MODEL,
            max_tokens=4,
            messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x"}]}],
        )
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    assert "tool_use_id" in bad.value.message
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.count_tokens(model="no-such-model", messages=QUESTION)


async def test_count_tokens_with_tools_equals_usage(client):
    messages = [{"role": "user", "content": "Is it raining in Lima?"}]
    counted = await client.messages.count_tokens(model=CHAT_MODEL, tools=[WEATHER_TOOL], messages=messages)
    without_tools = await client.messages.count_tokens(model=CHAT_MODEL, messages=messages)
    message = await client.messages.create(
        model=CHAT_MODEL, max_tokens=4, **GREEDY, tools=[WEATHER_TOOL], messages=messages
    )
    used = message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    assert counted.input_tokens == used > without_tools.input_tokens  # the tool's description counts


# The think model (tests.conftest.THINK_MODEL): the default GGUF with a template that opens a
# think block, so its thinking is real generated text the engine splits out.
# A budget the model spends before it would end its thought, so the engine closes the block and
# the model answers (a thought ended early may be followed by an empty answer).
THINK_QUESTION = QUESTION
THINKING_BUDGET = 6


async def test_thinking_block_within_the_budget(client):
    message = await client.messages.create(
        model=THINK_MODEL,
        max_tokens=32,
        **GREEDY,
        thinking={"type": "enabled", "budget_tokens": THINKING_BUDGET},
        messages=THINK_QUESTION,
    )
    kinds = [block.type for block in message.content]
    assert kinds[0] == "thinking" and "text" in kinds, kinds
    thinking = message.content[0]
    assert (
        thinking.thinking.strip()
        and "<think>" not in thinking.thinking
        and "</think>" not in thinking.thinking
    )
    assert isinstance(thinking.signature, str)
    spent = message.usage.output_tokens_details.thinking_tokens
    assert 1 <= spent <= THINKING_BUDGET
    assert message.usage.output_tokens > spent  # the model went on to answer
    # The thinking given back (as the SDK's to_param does) is accepted in the next turn.
    follow_up = await client.messages.create(
        model=THINK_MODEL,
        max_tokens=32,
        **GREEDY,
        thinking={"type": "enabled", "budget_tokens": THINKING_BUDGET},
        messages=[*THINK_QUESTION, message.to_param(), {"role": "user", "content": "And of Italy?"}],
    )
    assert follow_up.content


async def test_thinking_disabled_and_effort(client):
    off = await client.messages.create(
        model=THINK_MODEL, max_tokens=16, **GREEDY, thinking={"type": "disabled"}, messages=THINK_QUESTION
    )
    assert [block.type for block in off.content] == ["text"]
    assert off.usage.output_tokens_details is None
    low = await client.messages.create(
        model=THINK_MODEL, max_tokens=32, **GREEDY, output_config={"effort": "low"}, messages=THINK_QUESTION
    )
    assert low.content[0].type == "thinking"
    assert 1 <= low.usage.output_tokens_details.thinking_tokens <= THINK_EFFORT_BUDGETS["low_budget"]


async def test_streamed_thinking_equals_unary(client):
    kwargs = {
        "model": THINK_MODEL,
        "max_tokens": 32,
        **GREEDY,
        "thinking": {"type": "enabled", "budget_tokens": THINKING_BUDGET},
        "messages": THINK_QUESTION,
    }
    unary = await client.messages.create(**kwargs)
    async with client.messages.stream(**kwargs) as stream:
        deltas = [event.delta.type async for event in stream if event.type == "content_block_delta"]
        final = await stream.get_final_message()
    assert deltas[0] == "thinking_delta" and "thinking_delta" not in deltas[deltas.index("text_delta") :]
    assert [block.model_dump() for block in final.content] == [block.model_dump() for block in unary.content]
    assert (
        final.usage.output_tokens_details.thinking_tokens == unary.usage.output_tokens_details.thinking_tokens
    )


async def test_count_tokens_with_thinking_off_equals_usage(client):
    # Thinking off makes the template write a closed, empty think block: the count includes it.
    kwargs = {"model": THINK_MODEL, "thinking": {"type": "disabled"}, "messages": THINK_QUESTION}
    counted = await client.messages.count_tokens(**kwargs)
    message = await client.messages.create(max_tokens=2, **GREEDY, **kwargs)
    used = message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    assert counted.input_tokens == used
