"""Chat options on the transformers engine (SmolLM2-135M-Instruct loaded through transformers).

Stop sequences, tool calls, n > 1 choices and cancellation run on the real model; the
lifecycle test loads and unloads a dedicated catalog entry through ModelService.
"""

from __future__ import annotations

import collections
import json

import pytest
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import model_service_pb2 as m

from engines.generation.transformers_engine import TransformersGenerationEngine
from tests.conftest import HF_CHAT_MODEL
from tests.streams import FinishedSequences, read_then_cancel

LIFECYCLE_MODEL = "smollm2-hf-lifecycle"
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}},
    "required": ["city"],
}
WEATHER = g.ToolDefinition(
    name="get_weather",
    description="Get the current weather for a city",
    parameters_json_schema=json.dumps(WEATHER_SCHEMA),
)
QUESTION = "What is the capital of France?"


def params(**kwargs) -> g.GenerationParameters:
    return g.GenerationParameters(**kwargs)


def unary(content: str, parameters: g.GenerationParameters, model: str = HF_CHAT_MODEL) -> g.GenerateRequest:
    return g.GenerateRequest(
        model=model, messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content=content)], parameters=parameters
    )


def streamed(content: str, parameters: g.GenerationParameters) -> g.GenerateStreamRequest:
    return g.GenerateStreamRequest(
        model=HF_CHAT_MODEL,
        messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content=content)],
        parameters=parameters,
    )


async def collect(inference, request) -> list[g.GenerateStreamResponse]:
    return [message async for message in inference.GenerateStream(request)]


@pytest.fixture(scope="module")
async def engine(inference, server) -> TransformersGenerationEngine:
    await inference.Generate(unary("Hi", params(max_tokens=1, temperature=0)))
    loaded = server.manager.get(HF_CHAT_MODEL).engine
    assert isinstance(loaded, TransformersGenerationEngine)
    return loaded


async def test_stop_sequence_truncates_the_output(inference, engine):
    base = await inference.Generate(unary(QUESTION, params(max_tokens=32, temperature=0)))
    text = base.choices[0].text
    stop = text[len(text) // 3 : len(text) // 3 + 6]
    assert len(stop) == 6 and text.index(stop) > 0, text
    messages = await collect(inference, streamed(QUESTION, params(max_tokens=32, temperature=0, stop=[stop])))
    out = "".join(x.text for x in messages)
    assert out == text[: text.index(stop)]
    assert stop not in out
    assert messages[-1].finish_reason == g.FINISH_REASON_STOP
    # The tokens that completed the stop string were generated (and counted), not emitted as text.
    assert messages[-1].usage.completion_tokens < base.usage.completion_tokens
    unary_stopped = await inference.Generate(
        unary(QUESTION, params(max_tokens=32, temperature=0, stop=[stop]))
    )
    assert unary_stopped.choices[0].text == out
    assert unary_stopped.choices[0].finish_reason == g.FINISH_REASON_STOP


async def test_tool_call_through_the_transformers_engine(inference, engine):
    request = unary(
        "What is the weather in Paris right now?",
        params(
            max_tokens=60,
            temperature=0,
            tools=[WEATHER],
            tool_choice=g.ToolChoice(mode=g.TOOL_CHOICE_MODE_REQUIRED),
        ),
    )
    (choice,) = (await inference.Generate(request)).choices
    assert choice.finish_reason == g.FINISH_REASON_TOOL_CALLS
    assert choice.text == ""
    (call,) = choice.tool_calls
    assert call.name == "get_weather" and call.id.startswith("call_")
    arguments = json.loads(call.arguments_json)
    assert set(arguments) == {"city"} and isinstance(arguments["city"], str) and arguments["city"]


async def test_n_choices_are_distinct_indexed_and_usage_is_summed(inference, engine):
    n = 3
    request = streamed("Tell me a story.", params(max_tokens=10, temperature=1.0, seed=77, n=n))
    messages = await collect(inference, request)
    by_index = collections.defaultdict(list)
    for message in messages:
        by_index[message.index].append(message)
    assert sorted(by_index) == list(range(n))
    for mine in by_index.values():
        assert mine[-1].finish_reason in (g.FINISH_REASON_STOP, g.FINISH_REASON_LENGTH)
        assert all(x.finish_reason == g.FINISH_REASON_UNSPECIFIED for x in mine[:-1])
    texts = ["".join(x.text for x in by_index[i]) for i in range(n)]
    assert len(set(texts)) == n, texts
    usage = messages[-1].usage
    assert usage.completion_tokens == sum(len(x.token_ids) for x in messages)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # Unary: the same choices (the seed of choice i is seed + i), and the prompt counted once.
    response = await inference.Generate(
        unary("Tell me a story.", params(max_tokens=10, temperature=1.0, seed=77, n=n))
    )
    assert [c.index for c in response.choices] == list(range(n))
    assert [c.text for c in response.choices] == texts
    solo = await inference.Generate(unary("Tell me a story.", params(max_tokens=1, temperature=0)))
    assert response.usage.prompt_tokens == usage.prompt_tokens == solo.usage.prompt_tokens
    assert response.usage.completion_tokens == usage.completion_tokens


async def test_cancelled_stream_frees_its_sequence(inference, engine):
    finished = FinishedSequences(HF_CHAT_MODEL)
    call = inference.GenerateStream(
        streamed(
            "Count from one to five hundred in words, separated by commas.",
            params(max_tokens=400, temperature=0.7, seed=7),
        ),
        metadata=(("x-request-id", "hf-cancel-me"),),
    )
    received = await read_then_cancel(call, 3)
    # The step in flight when the cancel came finishes first.
    tokens = await finished.cancelled(1, engine=engine)
    assert received <= tokens < 400
    assert engine.scheduler.active_count == 0
    follow_up = await inference.Generate(unary("Hi", params(max_tokens=3, temperature=0)))
    assert follow_up.usage.completion_tokens >= 1
    assert follow_up.choices[0].finish_reason in (g.FINISH_REASON_STOP, g.FINISH_REASON_LENGTH)


async def test_load_and_unload_the_transformers_generation_model(inference, models, server):
    name = LIFECYCLE_MODEL
    before = (await models.GetModel(m.GetModelRequest(name=name))).model
    assert before.status == m.MODEL_STATUS_NOT_LOADED and before.memory.ram_bytes == 0

    loaded = (await models.LoadModel(m.LoadModelRequest(name=name))).model
    assert loaded.status == m.MODEL_STATUS_READY
    assert loaded.backend == "transformers" and loaded.device == "cpu"
    assert loaded.status_detail == "Running: transformers on cpu"
    assert loaded.loaded_at_unix_ms > 0
    # 135M float32 parameters (tied embeddings): about 540 MB.
    assert 400_000_000 < loaded.memory.ram_bytes < 1_500_000_000
    shown = (await models.GetModel(m.GetModelRequest(name=name))).model
    assert shown.status == m.MODEL_STATUS_READY and shown.memory.ram_bytes >= loaded.memory.ram_bytes

    response = await inference.Generate(
        unary("Name a fruit.", params(max_tokens=3, temperature=0), model=name)
    )
    assert response.usage.completion_tokens >= 1
    assert server.manager.get(name).load_count == 1

    unloaded = (await models.UnloadModel(m.UnloadModelRequest(name=name))).model
    assert unloaded.status == m.MODEL_STATUS_NOT_LOADED
    after = (await models.GetModel(m.GetModelRequest(name=name))).model
    assert after.status == m.MODEL_STATUS_NOT_LOADED
    assert after.memory.ram_bytes == 0 and after.loaded_at_unix_ms == 0
    assert server.manager.get(name).engine is None
