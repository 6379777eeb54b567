"""Chat options on the real SmolLM2 GGUF through llama.cpp: the features fakes alone cannot prove.

tool_choice auto (the whole-message tool-call parser), system and developer messages with
tool instructions merged into them, GenerateStream with n > 1, the cancelled finish reason
of a sequence whose deadline expired, and LoadModel/UnloadModel of a generation model.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging

import grpc
import pytest
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import model_service_pb2 as m

from engines.generation.structured import tool_instructions
from engines.types import GenerationRequest, ToolSpec
from tests.conftest import CHAT_MODEL
from tests.streams import FinishedSequences

LIFECYCLE_MODEL = "smollm2-lifecycle"

WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = g.ToolDefinition(
    name="get_weather",
    description="Get the current weather for a city",
    parameters_json_schema=json.dumps(WEATHER_SCHEMA),
)
SYSTEM_TEXT = "You are a weather assistant. Always answer in English."
QUESTION = "What is the weather in Paris right now?"


def msg(role: int, content: str) -> g.ChatMessage:
    return g.ChatMessage(role=role, content=content)


def unary(messages, **params) -> g.GenerateRequest:
    params.setdefault("temperature", 0)
    return g.GenerateRequest(model=CHAT_MODEL, messages=messages, parameters=g.GenerationParameters(**params))


async def prompt_tokens(inference, messages, **params) -> int:
    response = await inference.Generate(unary(messages, max_tokens=1, **params))
    return response.usage.prompt_tokens


# -- tool_choice auto: the whole-message parser ------------------------------------------------


# SmolLM2-135M does not call a tool from the instructions alone (it answers in prose), but it
# follows an earlier turn of the conversation in which the assistant answered with a call.
EXAMPLE_CALL = '{"name": "get_weather", "arguments": {"city": "Rome"}}'
FEW_SHOT = [
    msg(g.CHAT_ROLE_USER, "What is the weather in Rome?"),
    msg(g.CHAT_ROLE_ASSISTANT, EXAMPLE_CALL),
]


def auto_tool_request(cls, question: str = QUESTION, mode: int = g.TOOL_CHOICE_MODE_AUTO):
    return cls(
        model=CHAT_MODEL,
        messages=[msg(g.CHAT_ROLE_SYSTEM, SYSTEM_TEXT), *FEW_SHOT, msg(g.CHAT_ROLE_USER, question)],
        parameters=g.GenerationParameters(
            max_tokens=60, temperature=0, tools=[WEATHER], tool_choice=g.ToolChoice(mode=mode)
        ),
    )


async def test_auto_tool_call_is_parsed_from_the_whole_reply(inference):
    # No grammar forces the call: the model writes the JSON itself and the parser recognises it.
    response = await inference.Generate(auto_tool_request(g.GenerateRequest))
    (choice,) = response.choices
    assert choice.finish_reason == g.FINISH_REASON_TOOL_CALLS, choice.text
    assert choice.text == ""
    (call,) = choice.tool_calls
    assert call.name == "get_weather"
    assert call.id.startswith("call_")
    assert json.loads(call.arguments_json) == {"city": "Paris"}
    # The same reply with tool_choice none stays text: the parser, not the model, made the call.
    (plain,) = (
        await inference.Generate(auto_tool_request(g.GenerateRequest, mode=g.TOOL_CHOICE_MODE_NONE))
    ).choices
    assert not plain.tool_calls
    assert plain.finish_reason == g.FINISH_REASON_STOP
    assert json.loads(plain.text) == {"name": "get_weather", "arguments": {"city": "Paris"}}


async def test_auto_tool_call_streams_as_one_call_at_the_end(inference):
    messages = [m async for m in inference.GenerateStream(auto_tool_request(g.GenerateStreamRequest))]
    # Text that starts like a call is held back until it can be parsed whole.
    assert len(messages) > 5
    assert all(not m.tool_calls and m.finish_reason == g.FINISH_REASON_UNSPECIFIED for m in messages[:-1])
    assert "".join(m.text for m in messages) == ""
    final = messages[-1]
    (call,) = final.tool_calls
    assert call.name == "get_weather" and call.id.startswith("call_") and call.index == 0
    assert json.loads(call.arguments_json_delta) == {"city": "Paris"}
    assert final.finish_reason == g.FINISH_REASON_TOOL_CALLS
    assert final.usage.completion_tokens == sum(len(m.token_ids) for m in messages) > 0


async def test_auto_reply_that_is_not_a_call_streams_as_text(inference):
    request = auto_tool_request(g.GenerateStreamRequest, question="Thanks! Now say hello to my friend Tom.")
    messages = [m async for m in inference.GenerateStream(request)]
    text = "".join(m.text for m in messages)
    assert "Tom" in text and not text.lstrip().startswith("{")
    assert not any(m.tool_calls for m in messages)
    assert sum(1 for m in messages if m.text) > 1, "plain text should stream, not wait for the end"
    assert messages[-1].finish_reason == g.FINISH_REASON_STOP


# -- system and developer messages ---------------------------------------------------------------


AUTO_TOOLS = {"tools": [WEATHER], "tool_choice": g.ToolChoice(mode=g.TOOL_CHOICE_MODE_AUTO)}


def _expected_instructions() -> str:
    spec = ToolSpec(name=WEATHER.name, description=WEATHER.description, parameters=WEATHER_SCHEMA)
    return tool_instructions(GenerationRequest(request_id="", tools=[spec]))


async def test_tool_instructions_merge_into_the_system_message(inference):
    # Each tools request must cost exactly the prompt of the conversation written out by hand.
    instructions = _expected_instructions()
    question = msg(g.CHAT_ROLE_USER, QUESTION)
    merged = [msg(g.CHAT_ROLE_SYSTEM, f"{SYSTEM_TEXT}\n\n{instructions}"), question]
    with_system = [msg(g.CHAT_ROLE_SYSTEM, SYSTEM_TEXT), question]
    expected = await prompt_tokens(inference, merged)
    # One system turn holding both texts (not a second system turn)...
    assert await prompt_tokens(inference, with_system, **AUTO_TOOLS) == expected
    # ... and a developer message takes the instructions the same way.
    with_developer = [msg(g.CHAT_ROLE_DEVELOPER, SYSTEM_TEXT), question]
    assert await prompt_tokens(inference, with_developer, **AUTO_TOOLS) == expected
    # Without one, the instructions become the system turn, in place of the template's default one.
    alone = await prompt_tokens(inference, [msg(g.CHAT_ROLE_SYSTEM, instructions), question])
    assert await prompt_tokens(inference, [question], **AUTO_TOOLS) == alone
    # tool_choice none: no instructions at all.
    no_tools = {"tools": [WEATHER], "tool_choice": g.ToolChoice(mode=g.TOOL_CHOICE_MODE_NONE)}
    plain = await prompt_tokens(inference, with_system)
    assert await prompt_tokens(inference, with_system, **no_tools) == plain < expected


async def test_developer_message_is_treated_like_system(inference):
    # SmolLM2's template has no developer role: rendered literally, a developer turn would be
    # "<|im_start|>developer" after the template's default system prompt (a longer prompt).
    pirate = "You are a pirate. Start every answer with the word Arrr."
    question = msg(g.CHAT_ROLE_USER, QUESTION)
    as_system = await inference.Generate(unary([msg(g.CHAT_ROLE_SYSTEM, pirate), question], max_tokens=12))
    as_developer = await inference.Generate(
        unary([msg(g.CHAT_ROLE_DEVELOPER, pirate), question], max_tokens=12)
    )
    assert as_developer.usage.prompt_tokens == as_system.usage.prompt_tokens
    # The same prompt under greedy decoding: the same answer.
    assert as_developer.choices[0].text == as_system.choices[0].text


# -- GenerateStream with n > 1 --------------------------------------------------------------------


async def test_stream_with_n_choices_finishes_every_choice_and_sums_usage(inference):
    n = 3
    request = g.GenerateStreamRequest(
        model=CHAT_MODEL,
        messages=[msg(g.CHAT_ROLE_USER, "Write one sentence about the sea.")],
        parameters=g.GenerationParameters(max_tokens=12, temperature=0.9, seed=21, n=n),
    )
    messages = [message async for message in inference.GenerateStream(request)]
    by_index = collections.defaultdict(list)
    for message in messages:
        by_index[message.index].append(message)
    assert sorted(by_index) == list(range(n))
    assert len({message.id for message in messages}) == 1
    for index, mine in by_index.items():
        finishes = [x.finish_reason for x in mine if x.finish_reason != g.FINISH_REASON_UNSPECIFIED]
        assert len(finishes) == 1 and mine[-1].finish_reason == finishes[0], index
        assert finishes[0] in (g.FINISH_REASON_STOP, g.FINISH_REASON_LENGTH)
        assert sum(len(x.token_ids) for x in mine) <= 12
    # Usage and timings only on the very last message, summed over the choices.
    assert [i for i, x in enumerate(messages) if x.HasField("usage")] == [len(messages) - 1]
    usage = messages[-1].usage
    assert usage.completion_tokens == sum(len(x.token_ids) for x in messages)
    solo = await inference.Generate(
        unary([msg(g.CHAT_ROLE_USER, "Write one sentence about the sea.")], max_tokens=1)
    )
    assert usage.prompt_tokens == solo.usage.prompt_tokens  # the prompt counts once
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    texts = {i: "".join(x.text for x in mine) for i, mine in by_index.items()}
    assert len(set(texts.values())) > 1, "seed + i should give each choice its own sample"


# -- the cancelled finish reason --------------------------------------------------------------------


async def test_expired_deadline_ends_every_choice_cancelled(inference, server):
    # FINISH_REASON_CANCELLED never reaches the wire (the caller is gone; its status says
    # DEADLINE_EXCEEDED); it is the reason ur_generation_sequences_finished_total counts the
    # sequences the engine dropped under.
    await inference.Generate(
        unary([msg(g.CHAT_ROLE_USER, "Hi")], max_tokens=1)
    )  # loaded before the clock starts
    engine = server.manager.get(CHAT_MODEL).engine
    await engine.scheduler.drained()  # the warm-up's sequence counted before the counts are read
    # 1500 tokens take far longer than the 2 s deadline on any CPU, and the end-of-text tokens
    # (<|endoftext|>, <|im_start|>, <|im_end|>: ids 0-2) are banned, so no choice can finish on its
    # own first (on a quiet machine one sampled <|im_end|> after 96 tokens, within the deadline).
    no_end = [g.LogitBias(token_id=token, bias=-100) for token in (0, 1, 2)]
    request = g.GenerateStreamRequest(
        model=CHAT_MODEL,
        prompt="Count to two thousand: one, two,",
        parameters=g.GenerationParameters(max_tokens=1500, temperature=0.5, seed=3, n=2, logit_bias=no_end),
    )
    finished = FinishedSequences(CHAT_MODEL)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in inference.GenerateStream(
            request, timeout=2.0, metadata=(("x-request-id", "deadline-n2"),)
        ):
            pass
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # Both choices were cancelled (a choice that reached max_tokens would have finished with
    # length), so each generated fewer than its 1500 tokens.
    await finished.cancelled(2)
    assert finished.count("length") == finished.count("stop") == 0
    assert engine.scheduler.active_count == 0
    follow_up = await inference.Generate(unary([msg(g.CHAT_ROLE_USER, "Hi")], max_tokens=2))
    assert follow_up.usage.completion_tokens >= 1


# -- LoadModel / UnloadModel of a generation model ------------------------------------------------


async def get_model(models, name: str) -> m.Model:
    return (await models.GetModel(m.GetModelRequest(name=name))).model


async def test_load_and_unload_the_gguf_generation_model(inference, models, server, caplog):
    before = await get_model(models, LIFECYCLE_MODEL)
    assert before.status == m.MODEL_STATUS_NOT_LOADED
    assert before.memory.ram_bytes == 0 and before.loaded_at_unix_ms == 0

    loaded = (await models.LoadModel(m.LoadModelRequest(name=LIFECYCLE_MODEL))).model
    assert loaded.status == m.MODEL_STATUS_READY
    assert loaded.backend == "llama_cpp" and loaded.device == "cpu"
    assert loaded.status_detail == "Running: llama_cpp on cpu"
    # Q4_1 weights (about 100 MB) plus the f16 KV cache of n_ctx 512.
    assert 50_000_000 < loaded.memory.ram_bytes < 400_000_000
    assert loaded.loaded_at_unix_ms > 0
    shown = await get_model(models, LIFECYCLE_MODEL)
    assert shown.status == m.MODEL_STATUS_READY and shown.memory.ram_bytes == loaded.memory.ram_bytes

    response = await inference.Generate(
        g.GenerateRequest(
            model=LIFECYCLE_MODEL,
            messages=[msg(g.CHAT_ROLE_USER, "Name a fruit.")],
            parameters=g.GenerationParameters(max_tokens=4, temperature=0),
        )
    )
    assert response.usage.completion_tokens >= 1
    assert server.manager.get(LIFECYCLE_MODEL).load_count == 1  # served by the loaded engine

    # Unload right after a cancelled stream: the scheduler frees the cancelled sequence after
    # the step in flight, which may come after the unload; that must not fail.
    scheduler = server.manager.get(LIFECYCLE_MODEL).engine.scheduler
    call = inference.GenerateStream(
        g.GenerateStreamRequest(
            model=LIFECYCLE_MODEL,
            prompt="Count to one thousand: one, two,",
            parameters=g.GenerationParameters(max_tokens=400),
        )
    )
    await call.read()
    call.cancel()
    caplog.set_level(logging.ERROR, logger="engines.generation.scheduler")
    unloaded = (await models.UnloadModel(m.UnloadModelRequest(name=LIFECYCLE_MODEL))).model
    for _ in range(500):
        if scheduler.active_count == 0:
            break
        await asyncio.sleep(0.02)
    assert scheduler.active_count == 0
    assert not [r for r in caplog.records if r.name == "engines.generation.scheduler"], caplog.text
    assert unloaded.status == m.MODEL_STATUS_NOT_LOADED
    after = await get_model(models, LIFECYCLE_MODEL)
    assert after.status == m.MODEL_STATUS_NOT_LOADED
    assert after.memory.ram_bytes == 0 and after.loaded_at_unix_ms == 0
    assert server.manager.get(LIFECYCLE_MODEL).engine is None
