"""``POST /v1/responses`` against the fake server: request translation, answer shapes, errors.

Shapes are checked against the openai SDK's own types (``openai.types.responses.Response``),
validated strictly, so a field the SDK needs and we leave out fails here.
"""

from __future__ import annotations

import logging
import re

import grpc
import httpx
import pytest
from openai.types.responses import Response
from universal_runtime.v1 import common_pb2, generation_pb2

from tests.gateway.gateway_fakes import FakeServer, RpcFailure

URL = "/v1/responses"


def body(**extra):
    return {"model": "fake-llm", "input": "Hi", **extra}


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    return response.json()["error"]


def thinking_tool_answer() -> generation_pb2.GenerateResponse:
    """An answer that thought, said a little and called one function."""
    return generation_pb2.GenerateResponse(
        id="gen-9",
        model="fake-llm",
        choices=[
            generation_pb2.GenerateChoice(
                text="Let me look.",
                reasoning_content="The user wants weather.",
                tool_calls=[
                    generation_pb2.ToolCall(id="call_1", name="weather", arguments_json='{"city":"Paris"}')
                ],
                finish_reason=generation_pb2.FINISH_REASON_TOOL_CALLS,
            )
        ],
        usage=common_pb2.Usage(
            prompt_tokens=10, completion_tokens=7, total_tokens=17, cached_prompt_tokens=2, reasoning_tokens=5
        ),
    )


async def test_response_shape(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post(URL, json=body(metadata={"k": "v"}, user="u1", store=False))
    assert response.status_code == 200, response.text
    data = response.json()
    parsed = Response.model_validate(data, strict=False)
    assert re.fullmatch(r"resp_[0-9a-f]{48}", parsed.id)
    assert isinstance(data["created_at"], int)
    assert data["object"] == "response"
    assert data["status"] == "completed"
    assert data["error"] is None and data["incomplete_details"] is None
    assert parsed.output_text == "Hello there!"
    [message] = data["output"]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert re.fullmatch(r"msg_[0-9a-f]{48}", message["id"])
    assert message["content"] == [
        {"type": "output_text", "text": "Hello there!", "annotations": [], "logprobs": []}
    ]
    assert data["usage"] == {
        "input_tokens": 5,
        "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 8,
    }
    assert data["metadata"] == {"k": "v"} and data["user"] == "u1"
    assert data["text"] == {"format": {"type": "text"}} and data["tool_choice"] == "auto"
    assert data["parallel_tool_calls"] is True and data["tools"] == [] and data["store"] is False
    [call] = fake.inference.received
    assert call.method == "Generate"
    assert [(m.role, m.content) for m in call.request.messages] == [(generation_pb2.CHAT_ROLE_USER, "Hi")]
    assert fake.responses.stored == {}


async def test_request_translation(client: httpx.AsyncClient, fake: FakeServer) -> None:
    schema = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}
    tool = {
        "type": "function",
        "name": "weather",
        "description": "Weather.",
        "parameters": schema,
        "strict": True,
    }
    response = await client.post(
        URL,
        json=body(
            instructions="Be brief.",
            max_output_tokens=33,
            temperature=0.5,
            top_p=0.9,
            tools=[tool],
            tool_choice={"type": "function", "name": "weather"},
            text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}},
            reasoning={"effort": "minimal"},
            store=False,
        ),
    )
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["text"]["format"] == {
        "type": "json_schema",
        "name": "answer",
        "schema": schema,
        "strict": True,
    }
    assert data["tool_choice"] == {"type": "function", "name": "weather"}
    assert data["tools"] == [tool] and data["instructions"] == "Be brief."
    assert data["max_output_tokens"] == 33 and data["temperature"] == 0.5
    request = fake.inference.received[0].request
    assert request.messages[0].role == generation_pb2.CHAT_ROLE_SYSTEM
    assert request.messages[0].content == "Be brief."
    params = request.parameters
    assert params.max_tokens == 33 and params.temperature == 0.5 and params.top_p == pytest.approx(0.9)
    assert params.response_format.type == generation_pb2.RESPONSE_FORMAT_TYPE_JSON_SCHEMA
    assert (
        params.response_format.json_schema
        == '{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}'
    )
    assert params.response_format.schema_name == "answer"
    assert [(t.name, t.description) for t in params.tools] == [("weather", "Weather.")]
    assert params.tool_choice.mode == generation_pb2.TOOL_CHOICE_MODE_FUNCTION
    assert params.tool_choice.function_name == "weather"
    assert params.reasoning_effort == generation_pb2.REASONING_EFFORT_LOW


async def test_unset_options_are_not_sent(client: httpx.AsyncClient, fake: FakeServer) -> None:
    assert (await client.post(URL, json=body(store=False))).status_code == 200
    params = fake.inference.received[0].request.parameters
    for name in ("max_tokens", "temperature", "top_p", "reasoning_budget"):
        assert not params.HasField(name), name
    assert params.reasoning_effort == generation_pb2.REASONING_EFFORT_UNSPECIFIED


async def test_input_items_become_one_conversation(client: httpx.AsyncClient, fake: FakeServer) -> None:
    items = [
        {"role": "developer", "content": "Use tools."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Weather"},
                {"type": "input_text", "text": "in Paris?"},
            ],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Call it."}],
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "weather",
            "arguments": '{"city":"Paris"}',
            "id": "fc_1",
            "status": "completed",
        },
        {"type": "function_call", "call_id": "call_2", "name": "clock", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": [{"type": "input_text", "text": "noon"}],
        },
    ]
    assert (await client.post(URL, json=body(input=items, store=False))).status_code == 200
    messages = fake.inference.received[0].request.messages
    roles = [m.role for m in messages]
    assert roles == [
        generation_pb2.CHAT_ROLE_DEVELOPER,
        generation_pb2.CHAT_ROLE_USER,
        generation_pb2.CHAT_ROLE_ASSISTANT,
        generation_pb2.CHAT_ROLE_TOOL,
        generation_pb2.CHAT_ROLE_TOOL,
    ]
    assert messages[1].content == "Weather\nin Paris?"
    assistant = messages[2]
    assert assistant.content == "Looking." and assistant.reasoning_content == "Call it."
    assert [(c.id, c.name, c.arguments_json) for c in assistant.tool_calls] == [
        ("call_1", "weather", '{"city":"Paris"}'),
        ("call_2", "clock", "{}"),
    ]
    assert [(m.tool_call_id, m.name, m.content) for m in messages[3:]] == [
        ("call_1", "weather", "Sunny"),
        ("call_2", "clock", "noon"),
    ]
    assert "Sunny" not in assistant.content  # thinking and tool results never leak into the text


async def test_reasoning_and_function_call_output(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.generate_response = thinking_tool_answer()
    response = await client.post(URL, json=body(store=False))
    data = response.json()
    parsed = Response.model_validate(data)
    assert [item["type"] for item in data["output"]] == ["reasoning", "message", "function_call"]
    reasoning, message, call = data["output"]
    assert re.fullmatch(r"rs_[0-9a-f]{48}", reasoning["id"])
    assert reasoning["summary"] == [] and reasoning["content"] == [
        {"type": "reasoning_text", "text": "The user wants weather."}
    ]
    assert message["content"][0]["text"] == "Let me look." and parsed.output_text == "Let me look."
    assert re.fullmatch(r"fc_[0-9a-f]{48}", call["id"])
    assert (call["call_id"], call["name"], call["arguments"]) == ("call_1", "weather", '{"city":"Paris"}')
    assert data["usage"]["output_tokens_details"] == {"reasoning_tokens": 5}
    assert data["usage"]["input_tokens_details"] == {"cached_tokens": 2, "cache_write_tokens": 0}
    assert data["status"] == "completed"


async def test_only_a_call_has_no_message(client: httpx.AsyncClient, fake: FakeServer) -> None:
    answer = thinking_tool_answer()
    answer.choices[0].text = ""
    answer.choices[0].reasoning_content = ""
    fake.inference.generate_response = answer
    data = (await client.post(URL, json=body(store=False))).json()
    assert [item["type"] for item in data["output"]] == ["function_call"]


async def test_cut_at_max_output_tokens_is_incomplete(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.generate_response.choices[0].finish_reason = generation_pb2.FINISH_REASON_LENGTH
    data = (await client.post(URL, json=body(max_output_tokens=3, store=False))).json()
    Response.model_validate(data)
    assert data["status"] == "incomplete"
    assert data["incomplete_details"] == {"reason": "max_output_tokens"}
    assert data["output"][0]["status"] == "incomplete"


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        (
            {"input": [{"type": "image_generation_call", "id": "x"}]},
            "input[0]",
            "input items must be of type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0]",
            "input_image",
        ),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "Input should be"),
        ({"input": 5}, "input", ""),
        ({"input": []}, "input", "at least 1"),
        (
            {"input": [{"type": "function_call_output", "call_id": "call_9", "output": "x"}]},
            "input[0].call_id",
            "No function call found",
        ),
        ({"tools": [{"type": "web_search"}]}, "tools[0]", "web_search"),
        ({"tools": [{"type": "function", "name": "bad name!"}]}, "tools[0].name", ""),
        ({"tool_choice": {"type": "function", "name": "nope"}}, None, "not in tools"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "at most 16"),
        ({"metadata": {"k" * 65: "v"}}, "metadata", "64 characters"),
        ({"metadata": {"k": "v" * 513}}, "metadata", "512 characters"),
        ({"max_output_tokens": 0}, "max_output_tokens", ""),
        ({"truncation": "auto"}, "truncation", ""),
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name", ""),
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort", ""),
        ({"input": [{"role": "user", "content": "x"}] * 1025}, "input", "1024"),
        ({"previous_response_id": "r" * 257}, "previous_response_id", "256"),
    ],
)
async def test_bad_input_is_400(client: httpx.AsyncClient, fake: FakeServer, extra, param, words) -> None:
    error = error_of(await client.post(URL, json=body(**extra)), 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param, error
    assert words in error["message"]
    assert fake.inference.received == []


async def test_unknown_model_is_404(client: httpx.AsyncClient, fake: FakeServer) -> None:
    fake.inference.fail = RpcFailure(
        grpc.StatusCode.NOT_FOUND, "model 'nope' is not in the catalog", "MODEL_NOT_FOUND"
    )
    error = error_of(await client.post(URL, json=body(model="nope")), 404)
    assert error["code"] == "model_not_found"
    assert fake.responses.stored == {}


async def test_context_overflow_is_openai_context_length_exceeded(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    fake.inference.fail = RpcFailure(
        grpc.StatusCode.INVALID_ARGUMENT,
        "prompt too long",
        "INPUT_TOO_LONG",
        {"context_length": "2048", "prompt_tokens": "3000"},
    )
    error = error_of(await client.post(URL, json=body()), 400)
    assert error["code"] == "context_length_exceeded"
    assert error["param"] == "input"
    assert error["message"].startswith(
        "This model's maximum context length is 2048 tokens. However, your input resulted in 3000 tokens."
    )


async def test_include_is_accepted_and_what_it_names_is_logged(
    client: httpx.AsyncClient, fake: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway.routes.responses"):
        assert (await client.post(URL, json=body(include=[], store=False))).status_code == 200
        assert caplog.records == []  # the Agents SDK's empty list asks for nothing
        wanted = ["reasoning.encrypted_content"]
        assert (await client.post(URL, json=body(include=wanted, store=False))).status_code == 200
    assert [r.getMessage() for r in caplog.records] == [
        "responses: include not served: reasoning.encrypted_content"
    ]
