"""``/v1/messages`` (Anthropic Messages API) gateway logic against the fake gRPC server.

Shapes, the translation of requests, the order of streamed events, and every error in Anthropic's
shape. The real SDK against the real model is in tests/clients/test_anthropic.py.
"""

from __future__ import annotations

import json

import grpc
import httpx
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter
from universal_runtime.v1 import common_pb2, generation_pb2

from gateway.app import create_app
from tests.gateway.gateway_fakes import FakeServer, RpcFailure, asgi_client

URL = "/v1/messages"


def body(**extra):
    return {"model": "fake-llm", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}], **extra}


def sse_events(text: str) -> list[tuple[str, dict]]:
    """``(event name, data)`` of each event of an SSE body (comments skipped)."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        name = next(line[len("event:") :].strip() for line in lines if line.startswith("event:"))
        data = "\n".join(line[len("data:") :].lstrip() for line in lines if line.startswith("data:"))
        events.append((name, json.loads(data)))
    return events


def assert_anthropic_error(response: httpx.Response, status: int, error_type: str) -> str:
    assert response.status_code == status, response.text
    payload = response.json()
    assert payload["type"] == "error"
    assert payload["error"]["type"] == error_type
    assert payload["request_id"] == response.headers["x-request-id"]
    return payload["error"]["message"]


async def test_message_shape_parses_as_the_sdk_type(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(URL, json=body())
    assert response.status_code == 200, response.text
    answer = response.json()
    message = Message.model_validate(answer)
    assert message.id.startswith("msg_")
    assert message.type == "message" and message.role == "assistant"
    assert message.model == "fake-llm"
    assert [block.model_dump(exclude_none=True) for block in message.content] == [
        {"type": "text", "text": "Hello there!"}
    ]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    # 5 prompt tokens of which 4 came from the prefix cache: Anthropic counts those apart.
    assert answer["usage"] == {
        "input_tokens": 1,
        "output_tokens": 3,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
    }


async def test_request_translation(client: httpx.AsyncClient, fake: FakeServer) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    request = {
        "model": "fake-llm",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "stop_sequences": ["END", "STOP"],
        "metadata": {"user_id": "u-1"},
        "thinking": {"type": "enabled", "budget_tokens": 32},
        "tools": [{"name": "weather", "description": "Weather of a city", "input_schema": schema}],
        "tool_choice": {"type": "tool", "name": "weather"},
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Weather"}, {"type": "text", "text": "in Oslo?"}],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Call the tool.", "signature": "s"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "Sunny"}],
                    },
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
    }
    response = await client.post(URL, json=request)
    assert response.status_code == 200, response.text
    [call] = fake.inference.received
    sent = call.request
    roles = [m.role for m in sent.messages]
    assert roles == [
        generation_pb2.CHAT_ROLE_SYSTEM,
        generation_pb2.CHAT_ROLE_USER,
        generation_pb2.CHAT_ROLE_ASSISTANT,
        generation_pb2.CHAT_ROLE_TOOL,
        generation_pb2.CHAT_ROLE_USER,
    ]
    assert sent.messages[0].content == "Be brief.\nUse tools."
    assert sent.messages[1].content == "Weather\nin Oslo?"
    assistant = sent.messages[2]
    assert assistant.content == "Checking."
    assert assistant.reasoning_content == "Call the tool."
    assert [(c.id, c.name, json.loads(c.arguments_json)) for c in assistant.tool_calls] == [
        ("toolu_1", "weather", {"city": "Oslo"})
    ]
    assert (sent.messages[3].tool_call_id, sent.messages[3].content) == ("toolu_1", "Sunny")
    assert sent.messages[4].content == "And tomorrow?"
    params = sent.parameters
    assert params.max_tokens == 100
    assert params.temperature == pytest.approx(0.5) and params.top_p == pytest.approx(0.9)
    assert params.top_k == 40
    assert list(params.stop) == ["END", "STOP"]
    assert params.reasoning_budget == 32
    assert [(t.name, t.description, json.loads(t.parameters_json_schema)) for t in params.tools] == [
        ("weather", "Weather of a city", schema)
    ]
    assert params.tool_choice.mode == generation_pb2.TOOL_CHOICE_MODE_FUNCTION
    assert params.tool_choice.function_name == "weather"


@pytest.mark.parametrize(
    ("choice", "mode"),
    [
        ({"type": "auto"}, generation_pb2.TOOL_CHOICE_MODE_AUTO),
        ({"type": "any"}, generation_pb2.TOOL_CHOICE_MODE_REQUIRED),
        ({"type": "none"}, generation_pb2.TOOL_CHOICE_MODE_NONE),
    ],
)
async def test_tool_choice_modes(client: httpx.AsyncClient, fake: FakeServer, choice, mode) -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    response = await client.post(URL, json=body(tools=tools, tool_choice=choice))
    assert response.status_code == 200, response.text
    assert fake.inference.received[0].request.parameters.tool_choice.mode == mode


@pytest.mark.parametrize(("thinking", "budget"), [({"type": "disabled"}, 0), ({"type": "adaptive"}, None)])
async def test_thinking_maps_to_the_reasoning_budget(client, fake: FakeServer, thinking, budget) -> None:
    response = await client.post(URL, json=body(thinking=thinking))
    assert response.status_code == 200, response.text
    params = fake.inference.received[0].request.parameters
    assert (params.reasoning_budget if params.HasField("reasoning_budget") else None) == budget


async def test_is_error_tool_result_and_empty_content(client, fake: FakeServer) -> None:
    messages = [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True}],
        },
    ]
    response = await client.post(URL, json=body(messages=messages))
    assert response.status_code == 200, response.text
    sent = fake.inference.received[0].request.messages
    assert sent[1].content == "" and sent[1].tool_calls[0].arguments_json == "{}"
    assert (sent[2].role, sent[2].content) == (generation_pb2.CHAT_ROLE_TOOL, "Error: boom")


@pytest.mark.parametrize(
    ("effort", "level"),
    [
        ("low", generation_pb2.REASONING_EFFORT_LOW),
        ("medium", generation_pb2.REASONING_EFFORT_MEDIUM),
        ("high", generation_pb2.REASONING_EFFORT_HIGH),
        ("max", generation_pb2.REASONING_EFFORT_HIGH),
    ],
)
async def test_output_config_effort_and_format(client, fake: FakeServer, effort, level) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    config = {"effort": effort, "format": {"type": "json_schema", "schema": schema}}
    response = await client.post(URL, json=body(output_config=config))
    assert response.status_code == 200, response.text
    params = fake.inference.received[0].request.parameters
    assert params.reasoning_effort == level and not params.HasField("reasoning_budget")
    assert params.response_format.type == generation_pb2.RESPONSE_FORMAT_TYPE_JSON_SCHEMA
    assert json.loads(params.response_format.json_schema) == schema


@pytest.mark.parametrize(
    ("extra", "budget"),
    [
        ({}, None),
        ({"thinking": {"type": "disabled"}}, 0),
        ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, 2048),
        ({"thinking": {"type": "adaptive"}}, None),
    ],
)
async def test_count_tokens_is_one_tokenize_with_tools_and_thinking_and_no_generate(
    client, fake: FakeServer, extra, budget
) -> None:
    tools = [
        {"name": "f", "description": "Eff.", "input_schema": {"type": "object", "properties": {}}},
        {"name": "g", "input_schema": {"type": "object"}},
    ]
    request = {
        "model": "fake-llm",
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": tools,
        "tool_choice": {"type": "tool", "name": "g"},
        **extra,
    }
    response = await client.post(f"{URL}/count_tokens", json=request)
    assert response.status_code == 200, response.text
    assert response.json() == {"input_tokens": 7}  # the fake Tokenize's count
    [call] = fake.inference.received  # no Generate: a count takes no place in a generation queue
    assert call.method == "Tokenize"
    sent = call.request
    assert [m.content for m in sent.messages] == ["Be brief.", "Hi"]
    assert [(t.name, t.description, json.loads(t.parameters_json_schema)) for t in sent.tools] == [
        ("f", "Eff.", {"type": "object", "properties": {}}),
        ("g", "", {"type": "object"}),
    ]
    assert (sent.tool_choice.mode, sent.tool_choice.function_name) == (
        generation_pb2.TOOL_CHOICE_MODE_FUNCTION,
        "g",
    )
    assert (sent.reasoning_budget if sent.HasField("reasoning_budget") else None) == budget
    # The same prompt fields as /v1/messages sends for the same body.
    fake.inference.received.clear()
    assert (await client.post(URL, json={**request, "max_tokens": 4096})).status_code == 200
    params = fake.inference.received[0].request.parameters
    assert list(params.tools) == list(sent.tools) and params.tool_choice == sent.tool_choice
    assert params.HasField("reasoning_budget") == sent.HasField("reasoning_budget")
    assert params.reasoning_budget == sent.reasoning_budget


async def test_count_tokens_without_tools_sends_none(client, fake: FakeServer) -> None:
    request = {"model": "fake-llm", "messages": [{"role": "user", "content": "Hi"}]}
    assert (await client.post(f"{URL}/count_tokens", json=request)).json() == {"input_tokens": 7}
    [call] = fake.inference.received
    assert call.method == "Tokenize" and not call.request.tools
    assert call.request.tool_choice.mode == generation_pb2.TOOL_CHOICE_MODE_UNSPECIFIED
    assert not call.request.HasField("reasoning_budget")


async def test_count_tokens_refusal_of_tokenize_is_anthropic_400(client, fake: FakeServer) -> None:
    fake.inference.fail = RpcFailure(
        grpc.StatusCode.INVALID_ARGUMENT, "reasoning_budget: must be at most 4096", "INVALID_ARGUMENT"
    )
    request = {
        "model": "fake-llm",
        "messages": [{"role": "user", "content": "Hi"}],
        "thinking": {"type": "enabled", "budget_tokens": 100000},
    }
    response = await client.post(f"{URL}/count_tokens", json=request)
    assert response.status_code == 400, response.text
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "reasoning_budget" in response.json()["error"]["message"]


def _answer_with_thinking_and_tools() -> generation_pb2.GenerateResponse:
    return generation_pb2.GenerateResponse(
        id="gen-9",
        model="fake-llm",
        choices=[
            generation_pb2.GenerateChoice(
                index=0,
                text="Let me check.",
                reasoning_content="The user wants weather.",
                tool_calls=[
                    generation_pb2.ToolCall(id="call_a", name="weather", arguments_json='{"city":"Oslo"}'),
                    generation_pb2.ToolCall(id="call_b", name="weather", arguments_json='{"city":"Rome"}'),
                ],
                finish_reason=generation_pb2.FINISH_REASON_TOOL_CALLS,
            )
        ],
        usage=common_pb2.Usage(prompt_tokens=20, completion_tokens=12, total_tokens=32, reasoning_tokens=5),
    )


async def test_thinking_text_and_tool_use_blocks(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.generate_response = _answer_with_thinking_and_tools()
    response = await client.post(URL, json=body())
    assert response.status_code == 200, response.text
    message = Message.model_validate(response.json())
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    thinking, text, first, second = message.content
    assert thinking.thinking == "The user wants weather." and isinstance(thinking.signature, str)
    assert text.text == "Let me check."
    assert (first.name, first.input, second.input) == ("weather", {"city": "Oslo"}, {"city": "Rome"})
    assert first.id.startswith("toolu_") and first.id != second.id
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens_details.thinking_tokens == 5


async def test_disable_parallel_tool_use_keeps_the_first_call(client, fake: FakeServer) -> None:
    fake.inference.generate_response = _answer_with_thinking_and_tools()
    tools = [{"name": "weather", "input_schema": {"type": "object"}}]
    choice = {"type": "any", "disable_parallel_tool_use": True}
    response = await client.post(URL, json=body(tools=tools, tool_choice=choice))
    assert response.status_code == 200, response.text
    uses = [block for block in response.json()["content"] if block["type"] == "tool_use"]
    assert [use["input"] for use in uses] == [{"city": "Oslo"}]


async def test_stop_sequence_stop_reason(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.generate_response.choices[0].stop_sequence = "END"
    answer = (await client.post(URL, json=body(stop_sequences=["END"]))).json()
    assert (answer["stop_reason"], answer["stop_sequence"]) == ("stop_sequence", "END")
    fake.inference.stream_messages[-1].stop_sequence = "END"
    events = sse_events((await client.post(URL, json=body(stream=True, stop_sequences=["END"]))).text)
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


async def test_max_tokens_stop_reason(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.generate_response.choices[0].finish_reason = generation_pb2.FINISH_REASON_LENGTH
    response = await client.post(URL, json=body())
    assert response.json()["stop_reason"] == "max_tokens"


STREAM_ORDER = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_delta",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
]


async def test_stream_events_in_order(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(URL, json=body(stream=True))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert [name for name, _ in events] == STREAM_ORDER
    assert all(name == data["type"] for name, data in events)
    adapter = TypeAdapter(RawMessageStreamEvent)
    for _, data in events:
        adapter.validate_python(data)  # every event parses as the SDK's type
    start = events[0][1]["message"]
    assert start["id"].startswith("msg_") and start["content"] == [] and start["stop_reason"] is None
    assert events[1][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert (
        "".join(data["delta"]["text"] for name, data in events if name == "content_block_delta")
        == "Hello there!"
    )
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 3 and delta["usage"]["input_tokens"] == 1
    assert delta["usage"]["cache_read_input_tokens"] == 4
    assert "[DONE]" not in response.text
    assert fake.inference.received[0].method == "GenerateStream"


def _stream(*messages: generation_pb2.GenerateStreamResponse) -> list[generation_pb2.GenerateStreamResponse]:
    for message in messages:
        message.id, message.model = "gen-3", "fake-llm"
    messages[-1].usage.CopyFrom(common_pb2.Usage(prompt_tokens=7, completion_tokens=6, reasoning_tokens=2))
    return list(messages)


async def test_stream_thinking_text_and_tool_blocks(client: httpx.AsyncClient, fake: FakeServer) -> None:
    delta = generation_pb2.ToolCallDelta
    fake.inference.stream_messages = _stream(
        generation_pb2.GenerateStreamResponse(reasoning_content="Hmm"),
        generation_pb2.GenerateStreamResponse(reasoning_content=", weather."),
        generation_pb2.GenerateStreamResponse(text="Sure."),
        generation_pb2.GenerateStreamResponse(tool_calls=[delta(index=0, id="c0", name="weather")]),
        generation_pb2.GenerateStreamResponse(tool_calls=[delta(index=0, arguments_json_delta='{"city":')]),
        generation_pb2.GenerateStreamResponse(tool_calls=[delta(index=0, arguments_json_delta='"Oslo"}')]),
        generation_pb2.GenerateStreamResponse(
            tool_calls=[delta(index=1, id="c1", name="weather", arguments_json_delta="{}")],
            finish_reason=generation_pb2.FINISH_REASON_TOOL_CALLS,
        ),
    )
    response = await client.post(URL, json=body(stream=True))
    events = sse_events(response.text)
    starts = [data for name, data in events if name == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [
        (0, "thinking"),
        (1, "text"),
        (2, "tool_use"),
        (3, "tool_use"),
    ]
    assert starts[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert starts[2]["content_block"]["name"] == "weather" and starts[2]["content_block"]["id"].startswith(
        "toolu_"
    )
    deltas = [data for name, data in events if name == "content_block_delta"]
    assert [(d["index"], d["delta"]["type"]) for d in deltas] == [
        (0, "thinking_delta"),
        (0, "thinking_delta"),
        (1, "text_delta"),
        (2, "input_json_delta"),
        (2, "input_json_delta"),
        (3, "input_json_delta"),
    ]
    assert "".join(d["delta"].get("partial_json", "") for d in deltas if d["index"] == 2) == '{"city":"Oslo"}'
    stops = [data["index"] for name, data in events if name == "content_block_stop"]
    assert stops == [0, 1, 2, 3]  # each block closes before the next opens
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "tool_use"
    assert final["usage"]["output_tokens_details"] == {"thinking_tokens": 2}
    # Only one tool call when parallel use is off.
    response = await client.post(
        URL,
        json=body(
            stream=True,
            tools=[{"name": "weather", "input_schema": {"type": "object"}}],
            tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        ),
    )
    starts = [data for name, data in sse_events(response.text) if name == "content_block_start"]
    assert [s["content_block"]["type"] for s in starts] == ["thinking", "text", "tool_use"]


async def test_stream_failure_after_start_is_an_error_event(client, fake: FakeServer) -> None:
    fake.inference.stream_fail_after = 2
    response = await client.post(URL, json=body(stream=True))
    assert response.status_code == 200
    events = sse_events(response.text)
    name, data = events[-1]
    assert name == "error"
    assert data == {"type": "error", "error": {"type": "api_error", "message": "engine crashed"}}
    assert "message_stop" not in [n for n, _ in events]


async def test_stream_refused_up_front_is_an_http_error(client, fake: FakeServer) -> None:
    fake.inference.fail = RpcFailure(grpc.StatusCode.NOT_FOUND, "model 'x' not found", "MODEL_NOT_FOUND")
    response = await client.post(URL, json=body(stream=True, model="x"))
    assert_anthropic_error(response, 404, "not_found_error")


@pytest.mark.parametrize(
    ("failure", "status", "error_type"),
    [
        (
            RpcFailure(grpc.StatusCode.NOT_FOUND, "model 'nope' not found", "MODEL_NOT_FOUND"),
            404,
            "not_found_error",
        ),
        (
            RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, "bad", "INVALID_ARGUMENT"),
            400,
            "invalid_request_error",
        ),
        (RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full", "OVERLOADED"), 529, "overloaded_error"),
        (
            RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED, "too big", "MESSAGE_TOO_LARGE"),
            413,
            "request_too_large",
        ),
        (RpcFailure(grpc.StatusCode.INTERNAL, "engine crashed", "ENGINE_FAILED"), 500, "api_error"),
        (RpcFailure(grpc.StatusCode.UNAVAILABLE, "down"), 503, "api_error"),
    ],
)
async def test_server_errors_in_anthropic_shape(
    client, fake: FakeServer, failure, status, error_type
) -> None:
    fake.inference.fail = failure
    response = await client.post(URL, json=body())
    message = assert_anthropic_error(response, status, error_type)
    assert failure.message in message
    if status == 529:
        assert response.headers["retry-after"] == "1"


BAD_BODIES = [
    pytest.param(
        {"messages": [{"role": "user", "content": "Hi"}], "model": "m"}, "max_tokens", id="no-max-tokens"
    ),
    pytest.param(body(max_tokens=0), "max_tokens", id="max-tokens-zero"),
    pytest.param(body(messages=[]), "messages", id="no-messages"),
    pytest.param(body(temperature=1.5), "temperature", id="temperature-over-1"),
    pytest.param(body(top_p=-0.1), "top_p", id="top-p-negative"),
    pytest.param(body(top_k=-1), "top_k", id="top-k-negative"),
    pytest.param(body(stop_sequences=["x"] * 17), "stop_sequences", id="too-many-stops"),
    pytest.param(body(messages=[{"role": "system", "content": "x"}]), "messages[0]", id="system-role"),
    pytest.param(
        body(messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}]),
        "'image'",
        id="image-block",
    ),
    pytest.param(
        body(
            messages=[
                {"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}
            ]
        ),
        "'tool_use'",
        id="tool-use-from-user",
    ),
    pytest.param(
        body(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x"}]}]),
        "answers no tool_use",
        id="tool-result-without-call",
    ),
    pytest.param(body(tools=[{"name": "f"}]), "input_schema", id="tool-without-schema"),
    pytest.param(body(tools=[{"type": "bash_20250124", "name": "bash"}]), "bash_20250124", id="server-tool"),
    pytest.param(
        body(tools=[{"name": "f" * 65, "input_schema": {}}]), "tools[0].name", id="tool-name-too-long"
    ),
    pytest.param(
        body(tool_choice={"type": "tool", "name": "g"}), "not one of the tools", id="unknown-tool-choice"
    ),
    pytest.param(body(tool_choice={"type": "sometimes"}), "tool_choice", id="bad-tool-choice"),
    pytest.param(
        body(thinking={"type": "enabled", "budget_tokens": 16}), "budget_tokens", id="budget-not-below-max"
    ),
    pytest.param(body(thinking={"type": "enabled"}), "budget_tokens", id="budget-missing"),
    pytest.param(
        body(messages=[{"role": "user", "content": "x"}] * 4097), "messages", id="too-many-messages"
    ),
    pytest.param(body(metadata={"user_id": "u" * 257}), "user_id", id="user-id-too-long"),
    pytest.param(body(output_config={"effort": "ultra"}), "output_config.effort", id="unknown-effort"),
    pytest.param(
        body(messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "The answer is"}]),
        "prefill",
        id="prefill",
    ),
    pytest.param(
        body(
            messages=[
                {"role": "user", "content": "Go"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
            ]
        ),
        "messages[2].content[0].content: an empty tool_result",
        id="empty-tool-result",
    ),
    pytest.param(
        body(
            messages=[
                {"role": "user", "content": "Go"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": ""}]},
                {"role": "user", "content": "Well?"},
            ]
        ),
        "messages[1].content: an assistant turn needs",
        id="thinking-only-turn",
    ),
    pytest.param(
        body(messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}]),
        "text",
        id="empty-text-block",
    ),
    pytest.param(
        body(messages=[{"role": "user", "content": ""}]), "messages[0].content", id="empty-user-turn"
    ),
    pytest.param(
        body(output_config={"format": {"type": "json_object"}}),
        "output_config.format",
        id="format-not-json-schema",
    ),
]


@pytest.mark.parametrize(("request_body", "named"), BAD_BODIES)
async def test_bad_input_is_a_400_in_anthropic_shape(client, fake: FakeServer, request_body, named) -> None:
    response = await client.post(URL, json=request_body)
    message = assert_anthropic_error(response, 400, "invalid_request_error")
    assert named in message
    assert fake.inference.received == []  # refused before any call


async def test_body_that_is_not_json_is_a_400(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(URL, content=b"{not json", headers={"content-type": "application/json"})
    assert_anthropic_error(response, 400, "invalid_request_error")


@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
async def test_api_key_by_x_api_key_or_bearer(fake: FakeServer, header: str) -> None:
    async with asgi_client(create_app(fake.target, api_key="sk-test")) as http:
        missing = await http.post(URL, json=body())
        message = assert_anthropic_error(missing, 401, "authentication_error")
        assert "x-api-key" in message
        wrong = await http.post(URL, json=body(), headers={header: "sk-wrong"})
        assert_anthropic_error(wrong, 401, "authentication_error")
        assert fake.inference.received == []
        value = "sk-test" if header == "x-api-key" else "Bearer sk-test"
        answer = await http.post(URL, json=body(), headers={header: value})
        assert answer.status_code == 200, answer.text
        # The server is told which key called, in the canonical bearer form.
        assert fake.inference.received[0].metadata["authorization"] == "Bearer sk-test"
        # x-api-key opens the OpenAI routes too (one key check for the gateway).
        chat = await http.post(
            "/v1/chat/completions",
            json={"model": "fake-llm", "messages": [{"role": "user", "content": "Hi"}]},
            headers={header: value},
        )
        assert chat.status_code == 200, chat.text


async def test_browser_preflight_allows_anthropic_headers(fake: FakeServer) -> None:
    origin = "https://app.example.com"
    preflight = {
        "origin": origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": "anthropic-version, x-api-key, anthropic-dangerous-direct-browser-access",
    }
    async with asgi_client(create_app(fake.target, api_key="k", cors_origins=[origin])) as http:
        answer = await http.options(URL, headers=preflight)
    assert answer.status_code == 200, answer.text
    allowed = answer.headers["access-control-allow-headers"].lower()
    for header in ("anthropic-version", "x-api-key", "anthropic-dangerous-direct-browser-access"):
        assert header in allowed
