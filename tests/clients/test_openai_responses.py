"""The OpenAI Python SDK's Responses API (``responses.create``, ``responses.stream``, stored chains)
→ gateway → the real server on the default model (SmolLM2-135M GGUF).

The model is small: tool tests force the call with ``tool_choice`` and assert on structure.
"""

from __future__ import annotations

import json

import openai
import pytest

from tests.conftest import CHAT_MODEL, THINK_EFFORT_BUDGETS, THINK_MODEL

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


@pytest.fixture(scope="module")
async def sdk(gateway_url):
    async with openai.AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key="unused", max_retries=0) as client:
        yield client


async def test_create_and_retrieve(sdk):
    response = await sdk.responses.create(
        model=CHAT_MODEL,
        instructions="Answer in one short sentence.",
        input="What is the capital of France?",
        max_output_tokens=24,
        temperature=0,
        metadata={"case": "create"},
    )
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status in ("completed", "incomplete")
    assert response.output_text.strip()
    assert response.output[0].type == "message"
    usage = response.usage
    assert usage.input_tokens > 0 and 0 < usage.output_tokens <= 24
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.output_tokens_details.reasoning_tokens == 0
    assert response.metadata == {"case": "create"}

    fetched = await sdk.responses.retrieve(response.id)
    assert fetched.id == response.id and fetched.output_text == response.output_text
    items = await sdk.responses.input_items.list(response.id)
    assert [item.type for item in items.data] == ["message"]
    assert items.data[0].content[0].text == "What is the capital of France?"

    deleted = await sdk.responses.delete(response.id)
    assert deleted is None  # the SDK returns nothing on success
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.retrieve(response.id)


async def test_greedy_answer_matches_chat_completions(sdk):
    """The Responses API and Chat Completions are one contract: the same prompt, the same tokens."""
    question = "Name a colour."
    response = await sdk.responses.create(
        model=CHAT_MODEL, input=question, max_output_tokens=16, temperature=0, store=False
    )
    chat = await sdk.chat.completions.create(
        model=CHAT_MODEL, messages=[{"role": "user", "content": question}], max_tokens=16, temperature=0
    )
    assert response.output_text == chat.choices[0].message.content
    assert response.usage.input_tokens == chat.usage.prompt_tokens


async def test_cut_at_max_output_tokens_is_incomplete(sdk):
    response = await sdk.responses.create(
        model=CHAT_MODEL, input="Tell me a long story about a dragon.", max_output_tokens=4, store=False
    )
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 4


async def test_stream(sdk):
    # The SDK's get_final_response() wants response.completed (a cut stream ends response.incomplete),
    # so the limit is well above this answer's length.
    async with sdk.responses.stream(
        model=CHAT_MODEL, input="Count from one to five.", max_output_tokens=128, temperature=0
    ) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert len(deltas) >= 3, "tokens must stream as separate events"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert "".join(deltas) == final.output_text
    assert final.usage.output_tokens > 0
    stored = await sdk.responses.retrieve(final.id)
    assert stored.output_text == final.output_text


async def test_function_tool_round_trip_with_previous_response_id(sdk):
    first = await sdk.responses.create(
        model=CHAT_MODEL,
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=64,
        temperature=0,
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) >= 1, first.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id and call.id.startswith("fc_")
    assert isinstance(json.loads(call.arguments)["city"], str)  # strict: the schema's shape

    second = await sdk.responses.create(
        model=CHAT_MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 22 C"}],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=32,
        temperature=0,
    )
    assert second.previous_response_id == first.id
    assert [item.type for item in second.output] == ["message"]
    assert second.output_text.strip()
    # The chain was sent: the second prompt holds the question, the call and its output, more
    # than the question alone under the same tool choice.
    alone = await sdk.responses.create(
        model=CHAT_MODEL,
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=1,
        store=False,
    )
    assert second.usage.input_tokens > alone.usage.input_tokens + 10
    items = await sdk.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in items.data] == ["message", "function_call", "function_call_output"]


async def test_text_format_json_schema(sdk):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    response = await sdk.responses.create(
        model=CHAT_MODEL,
        input="Invent a person: give a name and an age.",
        text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}},
        max_output_tokens=64,
        temperature=0,
        store=False,
    )
    person = json.loads(response.output_text)
    assert set(person) == {"name", "age"}
    assert isinstance(person["name"], str) and isinstance(person["age"], int)
    assert response.text.format.type == "json_schema"


async def test_errors(sdk):
    with pytest.raises(openai.NotFoundError) as missing_model:
        await sdk.responses.create(model="no-such-model", input="Hi")
    assert missing_model.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError) as missing_previous:
        await sdk.responses.create(model=CHAT_MODEL, input="Hi", previous_response_id="resp_0123456789abcdef")
    assert missing_previous.value.code == "previous_response_not_found"
    with pytest.raises(openai.BadRequestError) as orphan:
        await sdk.responses.create(
            model=CHAT_MODEL, input=[{"type": "function_call_output", "call_id": "call_x", "output": "1"}]
        )
    assert orphan.value.body["param"] == "input[0].call_id"


async def test_chain_over_the_context_is_refused(sdk):
    """A chain that no longer fits the model's context is OpenAI's context_length_exceeded, not cut."""
    long_text = "The quick brown fox jumps over the lazy dog. " * 150  # about 1500 tokens a turn
    first = await sdk.responses.create(model=CHAT_MODEL, input=long_text, max_output_tokens=4)
    with pytest.raises(openai.BadRequestError) as overflow:
        await sdk.responses.create(
            model=CHAT_MODEL, input=long_text, previous_response_id=first.id, max_output_tokens=4
        )
    assert overflow.value.code == "context_length_exceeded"
    assert "maximum context length" in overflow.value.message


# The think model (tests.conftest.THINK_MODEL): the default GGUF with a template that opens a think
# block, so its thinking is real generated text the engine splits out; reasoning.effort picks the
# catalog's budgets (THINK_EFFORT_BUDGETS).
THINK_QUESTION = "What is the capital of France?"


async def test_reasoning_item_within_the_effort_budget(sdk):
    response = await sdk.responses.create(
        model=THINK_MODEL,
        input=THINK_QUESTION,
        reasoning={"effort": "low"},
        max_output_tokens=32,
        temperature=0,
    )
    kinds = [item.type for item in response.output]
    assert kinds[0] == "reasoning" and "message" in kinds, kinds
    reasoning = response.output[0]
    assert reasoning.id.startswith("rs_") and reasoning.summary == []
    [part] = reasoning.content
    assert part.type == "reasoning_text" and part.text.strip()
    assert "<think>" not in part.text and "</think>" not in part.text
    assert "<think>" not in response.output_text and "</think>" not in response.output_text
    spent = response.usage.output_tokens_details.reasoning_tokens
    assert 1 <= spent <= THINK_EFFORT_BUDGETS["low_budget"]
    assert response.reasoning.effort == "low"

    # Continued over previous_response_id: the thinking goes back as the earlier turn's reasoning.
    second = await sdk.responses.create(
        model=THINK_MODEL,
        previous_response_id=response.id,
        input="And of Italy?",
        reasoning={"effort": "low"},
        max_output_tokens=32,
        temperature=0,
    )
    assert second.output[0].type == "reasoning" and second.usage.input_tokens > response.usage.input_tokens
    items = await sdk.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in items.data] == ["message", "reasoning", "message", "message"]


async def test_effort_none_turns_thinking_off(sdk):
    response = await sdk.responses.create(
        model=THINK_MODEL,
        input=THINK_QUESTION,
        reasoning={"effort": "none"},
        max_output_tokens=16,
        temperature=0,
    )
    assert [item.type for item in response.output] == ["message"]
    assert response.usage.output_tokens_details.reasoning_tokens == 0
    assert response.output_text.strip()


async def test_streamed_reasoning_equals_unary(sdk):
    request = {
        "model": THINK_MODEL,
        "input": THINK_QUESTION,
        "reasoning": {"effort": "medium"},
        "max_output_tokens": 32,
        "temperature": 0,
        "store": False,
    }
    unary = await sdk.responses.create(**request)
    events = [event async for event in await sdk.responses.create(**request, stream=True)]
    kinds = [event.type for event in events]
    thought = kinds.index("response.reasoning_text.done")
    assert "response.reasoning_text.delta" in kinds[:thought]
    assert "response.reasoning_text.delta" not in kinds[thought:]
    assert "response.output_text.delta" not in kinds[:thought]
    thinking = "".join(event.delta for event in events if event.type == "response.reasoning_text.delta")
    done = next(event for event in events if event.type == "response.reasoning_text.done")
    assert done.text == thinking == unary.output[0].content[0].text
    final = events[-1].response
    assert [item.type for item in final.output] == [item.type for item in unary.output]
    assert final.output_text == unary.output_text
    assert (
        final.usage.output_tokens_details.reasoning_tokens
        == unary.usage.output_tokens_details.reasoning_tokens
    )
