"""OpenAI SDK → gateway → GGUF engine: tools, structured output, logprobs, n, legacy completions."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from gateway.app import create_app
from tests.conftest import CHAT_MODEL
from tests.gateway.gateway_fakes import serve_with_uvicorn

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 30}},
                "required": ["city"],
            },
        },
    }
]
WEATHER = [{"role": "user", "content": "What is the weather in Paris right now?"}]


@pytest.fixture(scope="module")
async def sdk(server):
    async with (
        serve_with_uvicorn(create_app(f"127.0.0.1:{server.port}")) as url,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client,
    ):
        yield client


async def test_tool_call_unary(sdk):
    completion = await sdk.chat.completions.create(
        model=CHAT_MODEL, messages=WEATHER, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=60
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments)["city"], str)


async def test_tool_call_streamed(sdk):
    stream = await sdk.chat.completions.create(
        model=CHAT_MODEL,
        messages=WEATHER,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0,
        max_tokens=60,
        stream=True,
    )
    chunks = [chunk async for chunk in stream]
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "get_weather" and deltas[0].id
    assert len(deltas) > 2
    arguments = "".join(d.function.arguments or "" for d in deltas)
    assert isinstance(json.loads(arguments)["city"], str)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "tool_calls"
    ]


async def test_tool_result_round_trip(sdk):
    """The tool's result reaches the prompt: the reply uses a value only the result holds."""
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": "call_1", "content": "31 degrees, hot and humid"}

    async def answer(messages):
        return await sdk.chat.completions.create(
            model=CHAT_MODEL, messages=messages, tools=TOOLS, tool_choice="none", max_tokens=30, temperature=0
        )

    with_result = await answer([*WEATHER, call, result])
    without_result = await answer([*WEATHER, call])
    reply = with_result.choices[0].message.content
    assert "31" in reply and "humid" in reply, reply
    assert "31" not in without_result.choices[0].message.content
    # The result's turn adds at least its own words to the prompt.
    assert with_result.usage.prompt_tokens >= without_result.usage.prompt_tokens + 6


async def test_json_schema_response_format(sdk):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "country": {"enum": ["France", "Spain"]}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    completion = await sdk.chat.completions.create(
        model=CHAT_MODEL,
        messages=[{"role": "user", "content": "Name a city in Europe."}],
        response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema}},
        max_tokens=80,
        temperature=0.5,
        seed=3,
    )
    jsonschema.validate(json.loads(completion.choices[0].message.content), schema)


async def test_logprobs_and_n(sdk):
    completion = await sdk.chat.completions.create(
        model=CHAT_MODEL,
        messages=[{"role": "user", "content": "Say something."}],
        max_tokens=6,
        temperature=0.8,
        seed=1,
        n=2,
        logprobs=True,
        top_logprobs=2,
    )
    assert [c.index for c in completion.choices] == [0, 1]
    for choice in completion.choices:
        content = choice.logprobs.content
        assert content and all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in content)


async def test_legacy_completion(sdk):
    completion = await sdk.completions.create(
        model=CHAT_MODEL, prompt="1, 2, 3, 4,", max_tokens=6, temperature=0
    )
    assert "5" in completion.choices[0].text
    assert completion.usage.completion_tokens == 6


async def test_invalid_schema_is_400(sdk):
    with pytest.raises(openai.BadRequestError):
        await sdk.chat.completions.create(
            model=CHAT_MODEL,
            messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}},
        )
