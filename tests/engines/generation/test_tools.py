"""Tool calls on the GGUF engine: parsed, streamed incrementally, finish_reason tool_calls."""

from __future__ import annotations

import json

import grpc
import pytest
from universal_runtime.v1 import generation_pb2 as g

from tests.conftest import CHAT_MODEL, error_info

WEATHER = g.ToolDefinition(
    name="get_weather",
    description="Get the current weather for a city",
    parameters_json_schema=json.dumps(
        {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}}, "required": ["city"]}
    ),
)
QUESTION = [g.ChatMessage(role=g.CHAT_ROLE_USER, content="What is the weather in Paris right now?")]


def tool_request(cls, choice: g.ToolChoice, tools=(WEATHER,)):
    return cls(
        model=CHAT_MODEL,
        messages=QUESTION,
        parameters=g.GenerationParameters(
            max_tokens=80, temperature=0, tools=list(tools), tool_choice=choice
        ),
    )


REQUIRED = g.ToolChoice(mode=g.TOOL_CHOICE_MODE_REQUIRED)
NAMED = g.ToolChoice(mode=g.TOOL_CHOICE_MODE_FUNCTION, function_name="get_weather")


@pytest.mark.parametrize("choice", [REQUIRED, NAMED])
async def test_unary_tool_call_is_parsed(inference, choice):
    response = await inference.Generate(tool_request(g.GenerateRequest, choice))
    (out,) = response.choices
    assert out.finish_reason == g.FINISH_REASON_TOOL_CALLS
    (call,) = out.tool_calls
    assert call.name == "get_weather"
    assert call.id.startswith("call_")
    arguments = json.loads(call.arguments_json)
    assert isinstance(arguments["city"], str) and arguments["city"]
    assert out.text == ""


async def test_streamed_tool_call_arrives_incrementally(inference):
    messages = [m async for m in inference.GenerateStream(tool_request(g.GenerateStreamRequest, REQUIRED))]
    pieces = [c for m in messages for c in m.tool_calls]
    assert pieces[0].name == "get_weather" and pieces[0].id.startswith("call_")
    assert len(pieces) > 2, "arguments should stream in several fragments"
    assert all(not p.name and not p.id for p in pieces[1:])
    arguments = json.loads("".join(p.arguments_json_delta for p in pieces))
    assert isinstance(arguments["city"], str)
    assert messages[-1].finish_reason == g.FINISH_REASON_TOOL_CALLS
    assert "".join(m.text for m in messages) == ""


async def test_tool_choice_none_answers_in_text(inference):
    response = await inference.Generate(
        tool_request(g.GenerateRequest, g.ToolChoice(mode=g.TOOL_CHOICE_MODE_NONE))
    )
    assert response.choices[0].finish_reason in (g.FINISH_REASON_STOP, g.FINISH_REASON_LENGTH)
    assert not response.choices[0].tool_calls


@pytest.mark.parametrize(
    ("tools", "choice", "field"),
    [
        ([g.ToolDefinition(name="", parameters_json_schema="{}")], REQUIRED, "parameters.tools[0].name"),
        ([g.ToolDefinition(name="has space")], REQUIRED, "parameters.tools[0].name"),
        ([WEATHER, WEATHER], REQUIRED, "parameters.tools[1].name"),
        (
            [g.ToolDefinition(name="f", parameters_json_schema="{not json")],
            REQUIRED,
            "parameters.tools[0].parameters_json_schema",
        ),
        (
            [WEATHER],
            g.ToolChoice(mode=g.TOOL_CHOICE_MODE_FUNCTION, function_name="nope"),
            "parameters.tool_choice.function_name",
        ),
        ([], REQUIRED, "parameters.tool_choice"),
    ],
)
async def test_bad_tool_definitions(inference, tools, choice, field):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(tool_request(g.GenerateRequest, choice, tools))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == field
