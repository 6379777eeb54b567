"""Tokenize with tools, tool choice and reasoning settings renders the prompt Generate renders.

On the real models of both engines (llama.cpp and transformers SmolLM2, and their reasoning
variants with a Qwen3-style template): the count equals Generate's ``usage.prompt_tokens`` for the
same messages and fields, bad fields are refused as Generate refuses them, and encoders ignore the
reasoning fields (they do not reason) while tools, which need messages, are refused.
"""

from __future__ import annotations

import grpc
import pytest
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import tokenization_pb2 as t

from tests.conftest import CHAT_MODEL, EMBED_MODEL, HF_CHAT_MODEL, HF_THINK_MODEL, THINK_MODEL, error_info

MODELS = [CHAT_MODEL, HF_CHAT_MODEL, THINK_MODEL, HF_THINK_MODEL]
THINKING = {THINK_MODEL, HF_THINK_MODEL}
MESSAGES = [
    g.ChatMessage(role=g.CHAT_ROLE_SYSTEM, content="You are terse."),
    g.ChatMessage(role=g.CHAT_ROLE_USER, content="What is the weather in Oslo?"),
]
WEATHER = g.ToolDefinition(
    name="get_weather",
    description="Current weather of a city.",
    parameters_json_schema='{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}',
)
TIME = g.ToolDefinition(name="get_time", description="Current time.")

# Fields shared by name by GenerationParameters and TokenizeRequest.
SETTINGS = {
    "tools": {"tools": [WEATHER, TIME]},
    "tool-required": {
        "tools": [WEATHER, TIME],
        "tool_choice": g.ToolChoice(mode=g.TOOL_CHOICE_MODE_REQUIRED),
    },
    "tool-named": {
        "tools": [WEATHER, TIME],
        "tool_choice": g.ToolChoice(mode=g.TOOL_CHOICE_MODE_FUNCTION, function_name="get_time"),
    },
    "tool-none": {"tools": [WEATHER], "tool_choice": g.ToolChoice(mode=g.TOOL_CHOICE_MODE_NONE)},
    "budget-0": {"reasoning_budget": 0},
    "effort-none": {"reasoning_effort": g.REASONING_EFFORT_NONE},
    "budget-0-tools": {"tools": [WEATHER], "reasoning_budget": 0},
    "budget-8-tool-required": {
        "tools": [WEATHER],
        "tool_choice": g.ToolChoice(mode=g.TOOL_CHOICE_MODE_REQUIRED),
        "reasoning_budget": 8,
    },
}


async def prompt_tokens(inference, model: str, **settings) -> int:
    """Generate's ``usage.prompt_tokens`` for MESSAGES with ``settings`` (one greedy token)."""
    params = g.GenerationParameters(max_tokens=16, temperature=0, **settings)
    response = await inference.Generate(g.GenerateRequest(model=model, messages=MESSAGES, parameters=params))
    return response.usage.prompt_tokens


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("case", list(SETTINGS))
async def test_count_equals_generate_prompt_tokens(inference, model, case):
    settings = SETTINGS[case]
    tokenized = await inference.Tokenize(t.TokenizeRequest(model=model, messages=MESSAGES, **settings))
    assert tokenized.count == await prompt_tokens(inference, model, **settings)
    # The same fields without the thinking setting: what the setting alone changes.
    tools_only = {key: value for key, value in settings.items() if key.startswith("tool")}
    without_thinking = await inference.Tokenize(
        t.TokenizeRequest(model=model, messages=MESSAGES, **tools_only)
    )
    plain = await inference.Tokenize(t.TokenizeRequest(model=model, messages=MESSAGES))
    offered = settings.get("tool_choice", g.ToolChoice()).mode != g.TOOL_CHOICE_MODE_NONE
    if settings.get("tools") and offered:  # the tools are written into the prompt
        assert "get_weather" in tokenized.rendered_prompt and tokenized.count > plain.count
    elif settings.get("tools"):  # tool_choice none: the tools are not offered, so not written
        assert list(tokenized.token_ids) == list(plain.token_ids)
    thinking_off = settings.get("reasoning_budget") == 0 or "reasoning_effort" in settings
    if thinking_off and model in THINKING:  # the prompt closes the think block the template opens
        assert tokenized.rendered_prompt.rstrip().endswith("</think>")
        assert tokenized.count > without_thinking.count
    elif model not in THINKING:  # a model that does not reason ignores the reasoning fields
        assert list(tokenized.token_ids) == list(without_thinking.token_ids)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"tools": [g.ToolDefinition(name="bad name")]}, "tools[0].name"),
        ({"tools": [TIME, TIME]}, "tools[1].name"),
        (
            {"tools": [g.ToolDefinition(name="f", parameters_json_schema="{")]},
            "tools[0].parameters_json_schema",
        ),
        ({"tool_choice": g.ToolChoice(mode=g.TOOL_CHOICE_MODE_REQUIRED)}, "tool_choice"),
        (
            {
                "tools": [TIME],
                "tool_choice": g.ToolChoice(mode=g.TOOL_CHOICE_MODE_FUNCTION, function_name="nope"),
            },
            "tool_choice.function_name",
        ),
        ({"tool_choice": g.ToolChoice(mode=99)}, "tool_choice.mode"),
        ({"reasoning_budget": -1}, "reasoning_budget"),
        ({"reasoning_budget": 4097}, "reasoning_budget"),  # over the server's max_tokens limit (4096)
        ({"reasoning_effort": 99}, "reasoning_effort"),
    ],
    ids=[
        "tool-name",
        "duplicate",
        "schema",
        "required-no-tools",
        "unknown-function",
        "mode",
        "budget<0",
        "budget>limit",
        "effort",
    ],
)
async def test_bad_fields_are_refused_as_generate_refuses_them(inference, fields, field):
    with pytest.raises(grpc.aio.AioRpcError) as tokenize_error:
        await inference.Tokenize(t.TokenizeRequest(model=CHAT_MODEL, messages=MESSAGES, **fields))
    with pytest.raises(grpc.aio.AioRpcError) as generate_error:
        await inference.Generate(
            g.GenerateRequest(
                model=CHAT_MODEL, messages=MESSAGES, parameters=g.GenerationParameters(**fields)
            )
        )
    assert tokenize_error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(tokenize_error.value).metadata["field"] == field
    assert error_info(generate_error.value).metadata["field"] == f"parameters.{field}"
    # The same complaint, the field named as each request names it.
    assert tokenize_error.value.details() == generate_error.value.details().replace("parameters.", "", 1)


async def test_tools_with_a_raw_prompt_are_refused(inference):
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await inference.Tokenize(t.TokenizeRequest(model=CHAT_MODEL, prompt="Hi", tools=[TIME]))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(error.value).metadata["field"] == "tools"


async def test_a_raw_prompt_with_thinking_off_counts_as_generate(inference):
    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>"
    tokenized = await inference.Tokenize(
        t.TokenizeRequest(model=THINK_MODEL, prompt=prompt, reasoning_budget=0)
    )
    generated = await inference.Generate(
        g.GenerateRequest(
            model=THINK_MODEL,
            prompt=prompt,
            parameters=g.GenerationParameters(max_tokens=1, reasoning_budget=0),
        )
    )
    plain = await inference.Tokenize(t.TokenizeRequest(model=THINK_MODEL, prompt=prompt))
    assert tokenized.count == generated.usage.prompt_tokens > plain.count  # the open block is closed


async def test_an_encoder_ignores_reasoning_fields_and_refuses_tools(inference):
    plain = await inference.Tokenize(t.TokenizeRequest(model=EMBED_MODEL, prompt="Hello there."))
    reasoning = await inference.Tokenize(
        t.TokenizeRequest(
            model=EMBED_MODEL,
            prompt="Hello there.",
            reasoning_budget=0,
            reasoning_effort=g.REASONING_EFFORT_HIGH,
        )
    )
    assert list(reasoning.token_ids) == list(plain.token_ids)
    with pytest.raises(grpc.aio.AioRpcError) as error:  # tools need messages, which encoders refuse
        await inference.Tokenize(t.TokenizeRequest(model=EMBED_MODEL, prompt="Hello there.", tools=[TIME]))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(error.value).metadata["field"] == "tools"
