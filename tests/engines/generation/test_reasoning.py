"""Reasoning on the real SmolLM2 GGUF over gRPC: split, budget, effort, thinking off, structured output.

The think models of tests/conftest.py are the default GGUF with a Qwen3-style chat template whose
generation prompt opens a think block: everything the model writes before the engine (or the
model) closes it is thinking. On QUESTION the model thinks for more than 80 tokens without closing
the block itself (greedy), so a budget N below that gives exactly N thinking tokens and the engine's
closing tokens, and the model then answers.
"""

from __future__ import annotations

import json

import grpc
import pytest
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import tokenization_pb2 as t

from tests.conftest import CHAT_MODEL, HF_THINK_MODEL, THINK_EFFORT_BUDGETS, THINK_MODEL, error_info

QUESTION = "Explain why the sky is blue."
CLOSING = "\n</think>\n\n"


def user(content: str = QUESTION) -> g.ChatMessage:
    return g.ChatMessage(role=g.CHAT_ROLE_USER, content=content)


def params(**fields) -> g.GenerationParameters:
    fields.setdefault("temperature", 0)
    fields.setdefault("max_tokens", 60)
    return g.GenerationParameters(**fields)


async def streamed(inference, model: str = THINK_MODEL, messages=None, prompt: str = "", **fields):
    """(thinking, text, token ids, last message) of a GenerateStream call."""
    if not prompt:
        messages = messages or [user()]
    request = g.GenerateStreamRequest(
        model=model, messages=messages, prompt=prompt, parameters=params(**fields)
    )
    thinking, text, ids, last = [], [], [], None
    async for message in inference.GenerateStream(request):
        thinking.append(message.reasoning_content)
        text.append(message.text)
        ids.extend(message.token_ids)
        last = message
    return "".join(thinking), "".join(text), ids, last


@pytest.mark.parametrize("model", [THINK_MODEL, HF_THINK_MODEL])
async def test_the_thinking_is_its_own_field_and_the_budget_closes_it(inference, model):
    thinking, text, _, last = await streamed(inference, model, reasoning_budget=12)
    assert thinking and text
    for part in (thinking, text):
        assert "<think>" not in part and "</think>" not in part
    assert last.usage.reasoning_tokens == 12
    # The closing tokens are part of the completion, not of the thinking.
    assert last.usage.completion_tokens > 12 + 3
    unary = await inference.Generate(
        g.GenerateRequest(model=model, messages=[user()], parameters=params(reasoning_budget=12))
    )
    choice = unary.choices[0]
    assert (choice.reasoning_content, choice.text) == (thinking, text)
    assert unary.usage.reasoning_tokens == 12


@pytest.mark.parametrize("budget", [1, 5, 20])
async def test_a_budget_of_n_gives_n_thinking_tokens_then_an_answer(inference, budget):
    thinking, text, _, last = await streamed(inference, reasoning_budget=budget)
    assert last.usage.reasoning_tokens == budget
    assert thinking and text.strip()


async def test_without_a_budget_the_model_thinks_until_max_tokens(inference):
    thinking, text, _, last = await streamed(inference)
    assert thinking and text == ""
    assert last.usage.reasoning_tokens == last.usage.completion_tokens == 60
    assert last.finish_reason == g.FINISH_REASON_LENGTH


@pytest.mark.parametrize(
    ("effort", "budget"),
    [
        (g.REASONING_EFFORT_LOW, THINK_EFFORT_BUDGETS["low_budget"]),
        (g.REASONING_EFFORT_MEDIUM, THINK_EFFORT_BUDGETS["medium_budget"]),
        (g.REASONING_EFFORT_HIGH, THINK_EFFORT_BUDGETS["high_budget"]),
    ],
)
async def test_effort_levels_take_the_catalogs_budgets(inference, effort, budget):
    by_effort = await streamed(inference, reasoning_effort=effort)
    assert by_effort[3].usage.reasoning_tokens == budget
    by_budget = await streamed(inference, reasoning_budget=budget)
    assert by_effort[:2] == by_budget[:2]
    # An explicit budget wins over the effort.
    both = await streamed(inference, reasoning_effort=effort, reasoning_budget=3)
    assert both[3].usage.reasoning_tokens == 3


@pytest.mark.parametrize("off", [{"reasoning_budget": 0}, {"reasoning_effort": g.REASONING_EFFORT_NONE}])
async def test_thinking_off_gives_no_thinking(inference, off):
    thinking, text, _, last = await streamed(inference, **off)
    assert thinking == "" and last.usage.reasoning_tokens == 0
    assert text.strip()
    # The template got enable_thinking=false: it wrote an empty, closed block into the prompt.
    on = await streamed(inference, max_tokens=1)
    rendered = await inference.Tokenize(t.TokenizeRequest(model=THINK_MODEL, messages=[user()]))
    assert rendered.rendered_prompt.endswith("<|im_start|>assistant\n<think>")
    assert last.usage.prompt_tokens > on[3].usage.prompt_tokens


async def test_greedy_answer_equals_the_answer_after_the_thinking_given_back(inference):
    """The answer after a budget's forced close is the model's answer to its own thinking, prefilled.

    Run A thinks under a budget; run B's prompt is the assistant turn the template renders from A's
    thinking as ``reasoning_content`` (cut before the turn's end, so the model continues it). When
    B's prompt tokens are exactly A's prompt and generated tokens up to the answer (checked), greedy
    decoding must give the same answer: it fails if the engine answered from a context other than
    the one it reports (closing tokens not fed, KV positions off, thinking dropped or altered).
    """
    budget, max_tokens = 16, 48
    thinking, answer, ids, last = await streamed(inference, reasoning_budget=budget, max_tokens=max_tokens)
    assert answer.strip() and last.usage.reasoning_tokens == budget
    prompt = await inference.Tokenize(t.TokenizeRequest(model=THINK_MODEL, messages=[user()]))
    given_back = await inference.Tokenize(
        t.TokenizeRequest(
            model=THINK_MODEL,
            messages=[user(), g.ChatMessage(role=g.CHAT_ROLE_ASSISTANT, reasoning_content=thinking)],
            add_generation_prompt=False,
        )
    )
    continuation = given_back.rendered_prompt.removesuffix("<|im_end|>\n")
    # The template rendered the given-back thinking as the model's own block.
    assert continuation == prompt.rendered_prompt + thinking + CLOSING
    raw = await inference.Tokenize(t.TokenizeRequest(model=THINK_MODEL, prompt=continuation))
    thought = len(raw.token_ids) - len(prompt.token_ids)  # the thinking and the closing tokens
    assert thought > budget
    assert list(raw.token_ids) == list(prompt.token_ids) + ids[:thought]
    b_thinking, b_answer, _, b_last = await streamed(
        inference, prompt=continuation, max_tokens=max_tokens - thought
    )
    assert b_thinking == "" and b_last.usage.reasoning_tokens == 0
    assert b_answer == answer


async def test_structured_output_is_strict_json_after_unconstrained_thinking(inference):
    free = await streamed(inference, reasoning_budget=8, max_tokens=40)
    fmt = g.ResponseFormat(
        type=g.RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
        json_schema=json.dumps(
            {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
        ),
    )
    thinking, text, _, last = await streamed(
        inference, reasoning_budget=8, max_tokens=40, response_format=fmt
    )
    # The thinking was sampled without the grammar: the same as without a response format.
    assert thinking == free[0] and not thinking.lstrip().startswith("{")
    assert isinstance(json.loads(text)["color"], str)
    assert last.usage.reasoning_tokens == 8


async def test_a_required_tool_call_is_read_from_the_answer(inference):
    tool = g.ToolDefinition(
        name="get_weather",
        parameters_json_schema=json.dumps(
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        ),
    )
    response = await inference.Generate(
        g.GenerateRequest(
            model=THINK_MODEL,
            messages=[user("What is the weather in Paris?")],
            parameters=params(
                reasoning_budget=6,
                tools=[tool],
                tool_choice=g.ToolChoice(mode=g.TOOL_CHOICE_MODE_REQUIRED),
            ),
        )
    )
    choice = response.choices[0]
    assert choice.reasoning_content and choice.text == ""
    assert [c.name for c in choice.tool_calls] == ["get_weather"]
    assert isinstance(json.loads(choice.tool_calls[0].arguments_json)["city"], str)
    assert choice.finish_reason == g.FINISH_REASON_TOOL_CALLS


async def test_a_model_that_does_not_reason_ignores_the_budget(inference):
    thinking, text, _, last = await streamed(inference, CHAT_MODEL, reasoning_budget=2, max_tokens=12)
    assert thinking == "" and text and last.usage.reasoning_tokens == 0


@pytest.mark.parametrize(
    ("fields", "messages", "field"),
    [
        ({"reasoning_budget": -1}, None, "parameters.reasoning_budget"),
        ({"reasoning_budget": 61}, None, "parameters.reasoning_budget"),  # over max_tokens (60)
        ({"reasoning_effort": 99}, None, "parameters.reasoning_effort"),
        (
            {},
            [g.ChatMessage(role=g.CHAT_ROLE_USER, content="hi", reasoning_content="no")],
            "messages[0].reasoning_content",
        ),
    ],
)
async def test_bad_reasoning_inputs_are_invalid_arguments(inference, fields, messages, field):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(
            g.GenerateRequest(model=THINK_MODEL, messages=messages or [user()], parameters=params(**fields))
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(caught.value)
    assert info.reason == "INVALID_ARGUMENT" and info.metadata["field"] == field
